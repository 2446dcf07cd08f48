"""Jupyter widgets (anywidget): TokenView for any generation result, Playground for interactive runs."""

from widgets.playground import Playground, local_provider
from widgets.token_view import TokenView

__all__ = ["Playground", "TokenView", "local_provider"]
