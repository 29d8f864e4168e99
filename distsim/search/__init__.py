"""Evolutionary policy search: candidates evaluated as whole simulations on the sweep runner."""
