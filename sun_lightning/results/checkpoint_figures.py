"""The figures a report draws from its runs' final checkpoints, not from MLflow: the SVF each method learned (the
paper's Figure 37, :mod:`~sun_lightning.results.svf_maps`) and the pseudocounts at several radii on the data of a run
trained with true counts (Figure 22, :mod:`~sun_lightning.results.radius_maps`).

A checkpoint is where the study ran (``checkpoints/<experiment>/<run>/last.ckpt``); a report regenerated elsewhere
draws what it finds and leaves out the rest.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from sun_lightning.results import radius_maps, svf_maps
from sun_lightning.results.heatmaps import save_png
from sun_lightning.tracking.naming import env_name


def checkpoint_figures(out: Path, env_id: str, finals: dict[str, Path],
                       true_counts: dict[str, Path]) -> tuple[list[Path], list[tuple[str, str]]]:
    """Draw ``svf.png`` from ``finals`` (label → a method's final checkpoint) where the environment's V(s, g) has a
    picture, and ``pseudocount_radii.png`` from ``true_counts`` (label → a true-count run's final checkpoint) where its
    counts are not exact; returns the files written and their (title, file name) for the report."""
    written, figures = [], []
    finals = {name: path for name, path in finals.items() if path.is_file()}
    if finals and svf_maps.no_picture(env_id) is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # arguments an older version had: the networks still load strictly
            panels = {name: svf_maps.load_learner(path) for name, path in finals.items()}
        figure = svf_maps.svf_figure(panels)
        figure.suptitle(f"{env_name(env_id)}: V(s, g) at the end of training, one block per goal g (red dot), "
                        "states inside", fontsize=10)
        written.append(save_png(figure, out / "svf.png"))
        figures.append(("the learned V(s, g), one block per goal", "svf.png"))
    true_counts = {name: path for name, path in true_counts.items() if path.is_file()}
    if true_counts and not radius_maps.goal_space(env_id).exact_counts:
        data = {name: radius_maps.stored_goals(path) for name, path in true_counts.items()}
        written.append(save_png(radius_maps.radius_figure(data), out / "pseudocount_radii.png"))
        figures.append(("true counts and pseudocounts at decreasing ρ on a true-count run's data",
                        "pseudocount_radii.png"))
    return written, figures
