"""The paper's study as one command: every environment, method and seed, on one machine or on a
Ray cluster, into one MLflow experiment and one study report.

One concept per module:

- :mod:`~sun_lightning.study.plan`: which runs a study has (configs × methods and grid variants × seeds),
  the paper's suite, budget scaling, and the ``fit`` command of one run;
- :mod:`~sun_lightning.study.local`: runs as local processes, ``--jobs`` at a time;
- :mod:`~sun_lightning.study.ray_launcher`: runs as Ray tasks, retried from their last checkpoint when a
  worker dies.
- :mod:`~sun_lightning.study.report`: the finished runs gathered from MLflow, the reports written into the results
  folder and onto the parent run, the console tables.

The command line is :mod:`sun_lightning.compare`; the cross-environment report is
:mod:`sun_lightning.results.study`.
"""
