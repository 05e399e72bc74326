"""Results a researcher can look at: heatmaps, curves and the comparison report (SPEC §7).

One concept per module:

- :mod:`~sun_lightning.results.goal_grid`: where goals land in a picture (gridworld tiles or 2-D bins);
- :mod:`~sun_lightning.results.value_maps`: V(s₀, g) and the selection score over goals;
- :mod:`~sun_lightning.results.snapshot`: the numbers of one run's heatmaps at one moment;
- :mod:`~sun_lightning.results.heatmaps`: drawing snapshots (one run; several methods side by side);
- :mod:`~sun_lightning.results.curves`: coverage and entropy against env frames, with bands over seeds;
- :mod:`~sun_lightning.results.goal_stages`: goals selected and reached at each quarter of training, methods side by side;
- :mod:`~sun_lightning.results.auc_bars`: absolute AUCs per environment and their average over environments;
- :mod:`~sun_lightning.results.relative`: the paper's relative AUC improvement;
- :mod:`~sun_lightning.results.domains`: the paper's families of environments, and LunarLanderFull out of its averages;
- :mod:`~sun_lightning.results.intervals`: 95 % bootstrap intervals over seeds, probability of improvement, IQM;
- :mod:`~sun_lightning.results.labels`: the methods' names in tables;
- :mod:`~sun_lightning.results.runtime`: run time and hardware, the paper's runtime table and speed-ups;
- :mod:`~sun_lightning.results.runs`: finished runs read back from MLflow;
- :mod:`~sun_lightning.results.report`: the comparison report of one environment (Markdown, CSV, PNG);
- :mod:`~sun_lightning.results.study`: the study report across environments.

The Lightning side is :class:`sun_lightning.callbacks.results.ResultsLogger`; the comparison and study runner is
:mod:`sun_lightning.compare` (launchers in :mod:`sun_lightning.study`).
"""
