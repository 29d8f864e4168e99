"""Calibration: fit distsim's step model to measurements and check it, as one pipeline.

    python -m distsim.calibrate steps FOLDER [overrides...] [--fit [--lomo]] [--out DIR]
    python -m distsim.calibrate runs RUN... | SUITE_FOLDER [overrides...] [--steps STEP_FIT] [--lomo] [--out FIT.json]
    python -m distsim.calibrate residuals SUITE_FOLDER [overrides...] [--runs ID,ID] [--out FILE.md]
    python -m distsim.calibrate validate RUN | SUITE_FOLDER [overrides...] [--fit FIT.json] [--out DIR]
    python -m distsim.calibrate report FIT.json [--steps STEP_FIT.json] [--residuals] [--out FILE.md]

The stages, in the order the data flows, and the module that does each:

1. **read data**: a run with per-request times (a vLLM bench folder or a CSV run:
   :mod:`distsim.fidelity.readers`), a folder of runs with per-stage aggregates laid out like
   ``../shared/data/h100_vllm_runs`` (:mod:`distsim.fidelity.suite.data`), a folder of engine-step
   tables laid out like ``../shared/data/h100_steps`` (:mod:`distsim.fidelity.steps.data`);
2. **price steps**: every measured step timed by the configured latency model on the GPU it was
   measured on (:mod:`distsim.fidelity.steps.compare`);
3. **replay runs**: one replay path for both kinds of run (:mod:`distsim.fidelity.replay`), in worker
   processes when fitting (:mod:`distsim.fidelity.pool`), both sides of every comparison measured by
   one metric definition (:mod:`distsim.fidelity.metrics`);
4. **fit GPU terms on step tables** (``steps --fit``): every GPU coefficient of the per-operator model
   by bounded linear least squares, ``scipy.optimize.lsq_linear`` (:mod:`distsim.fidelity.steps.nnls`);
5. **fit GPU and serving terms on runs, toward their prior** (``runs``): the terms of
   :data:`distsim.fidelity.runfit.TERMS` (config keys with their bounds: the parameter box) by bounded
   Gauss-Newton on the runs' whole-run errors beside one prior row per term, each step
   ``scipy.optimize.lsq_linear`` (:mod:`distsim.fidelity.runfit`; :mod:`.runs` feeds it either kind of
   run); what the runs cannot pin is held at its prior and named. By default the GPU terms move only on a
   GPU without its own step fit (the H100's are its step tables'; ``--steps`` gives yours);
6. **residuals** and **validate**: where each run's error sits, its simulated mean ITL and TTFT split
   into the model's parts (:mod:`distsim.fidelity.residuals`); replay at given values and compare
   (``validate``: validation.json for a run, suite.csv and suite.md for a folder of runs);
7. **report**: a fit's values, per-run errors in sample and leave-one-model-out, load slopes and (with
   ``--residuals``) where each run's error sits, as Markdown (:mod:`.report`, :mod:`distsim.fidelity.residuals`).

docs/calibration.md walks through it with the shipped data.
"""

from distsim.calibrate.cli import main

__all__ = ["main"]
