"""Partition Explorer's pure core: layouts in, sharding reports out. Never imports Streamlit."""

from explorer.errors import ExplorerError

__all__ = ["ExplorerError"]
