"""Streamlit UI over session event logs and snapshots (``ftagent ui``).

Nothing heavy is imported here: ``data`` (pandas) and ``app`` (streamlit) are imported on use.
"""
