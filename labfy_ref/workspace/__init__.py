"""Workspaces: the directory layout, the SQLite store and the embedded SPECIMEN (SPEC §2)."""

from labfy_ref.workspace.layout import (
    Workspace,
    WorkspaceKind,
    WorkspaceLock,
    default_specimen_workspace,
    init_workspace,
    open_workspace,
    upgrade_workspace,
    user_data_dir,
)
from labfy_ref.workspace.migrations import SCHEMA_VERSION, StoreUpgrade
from labfy_ref.workspace.store import Campaign, Grant, StoredObject, WorkspaceStore

__all__ = [
    "SCHEMA_VERSION",
    "Campaign",
    "Grant",
    "StoreUpgrade",
    "StoredObject",
    "Workspace",
    "WorkspaceKind",
    "WorkspaceLock",
    "WorkspaceStore",
    "default_specimen_workspace",
    "init_workspace",
    "open_workspace",
    "upgrade_workspace",
    "user_data_dir",
]
