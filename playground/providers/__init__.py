"""Providers: one module per kind of model source behind one small Protocol (base.py)."""
