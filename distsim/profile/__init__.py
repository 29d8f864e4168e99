"""``python -m distsim.profile``: time what the step model needs on the user's own device and write
engine-step tables in the layout ``python -m distsim.calibrate steps`` reads.

A backend (:mod:`distsim.profile.backend`: numpy on the CPU, PyTorch on CUDA or the CPU) runs a dense
or mixture-of-experts model's forward pass layer by layer (:mod:`distsim.profile.forward`) over a grid of decode, prefill,
chunked-prefill and mixed steps (:mod:`distsim.profile.grid`), and the operators alone (GEMMs by
shape, attention by context and KV heads, the sampler by vocabulary, a MoE model's router, top-k and
expert GEMMs by rows per expert: :mod:`distsim.profile.micro`; all-reduce by size and group size:
:mod:`distsim.profile.collectives`, which ``calibrate steps --fit`` fits: :mod:`distsim.fidelity.collectives`).
:mod:`distsim.profile.tables` writes the folder: the step tables, the micro tables, ``device.json``
(the device's measured peaks, for a device the catalog does not know) and ``profile.json`` (which
model each step table is of), which the step reader follows (:mod:`distsim.fidelity.steps.data`).
"""
