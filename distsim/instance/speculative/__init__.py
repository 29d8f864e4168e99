"""Speculative decoding (``cluster.engine.speculative``): a draft proposes k tokens per decoding sequence, the
target model verifies them in one step, and an accepted prefix plus one token of the target's own comes out.

The parts: the acceptance model (acceptance.py), the draft's cost (draft.py), the settings as resolved from the
config (settings.py), the decoders with a token clock each (decoders.py) and the engine's speculative step
cycle (engine.py). Off by default; an engine without it is the plain :class:`distsim.instance.instance.Instance`
and pays nothing for it.
"""
