"""The workspace store's tables as the store queries them, in SQLAlchemy Core (WS-01).

The DDL that creates them is the released text of :mod:`labfy_ref.workspace.migrations`
(version 1 and each step since, never edited); these declarations only name the columns
the store's statements read and write, in the order the table holds them. A test compares
a new store's tables with these, so the two cannot drift.
"""

from __future__ import annotations

from sqlalchemy import Column, Float, Integer, MetaData, Table, Text

METADATA = MetaData()

meta = Table("meta", METADATA,
             Column("key", Text, primary_key=True),
             Column("value", Text, nullable=False))
objects = Table("objects", METADATA,
                Column("object_id", Text, primary_key=True),
                Column("kind", Text, nullable=False),
                Column("title", Text, nullable=False),
                Column("body", Text, nullable=False),
                Column("created_at", Text, nullable=False))
campaigns = Table("campaigns", METADATA,
                  Column("campaign_id", Text, primary_key=True),
                  Column("workspace_id", Text, nullable=False),
                  Column("topic", Text, nullable=False),
                  Column("questions", Text, nullable=False),
                  Column("object_refs", Text, nullable=False),
                  Column("status", Text, nullable=False),
                  Column("evidence", Text, nullable=False),
                  Column("created_at", Text, nullable=False),
                  Column("updated_at", Text, nullable=False))
grants = Table("grants", METADATA,
               Column("grant_id", Text, primary_key=True),
               Column("campaign_id", Text, nullable=False),
               Column("workspace_id", Text, nullable=False),
               Column("created_at", Text, nullable=False),
               Column("expires_at", Text),
               Column("revoked_at", Text))
specimen_evidence = Table("specimen_evidence", METADATA,
                          Column("evidence_id", Integer, primary_key=True),
                          Column("keywords", Text, nullable=False),
                          Column("source", Text, nullable=False),
                          Column("excerpt", Text, nullable=False))
usage = Table("usage", METADATA,
              Column("usage_id", Integer, primary_key=True),
              Column("at", Text, nullable=False),
              Column("model", Text, nullable=False),
              Column("prompt_tokens", Integer),
              Column("completion_tokens", Integer),
              Column("cached_tokens", Integer),
              Column("latency_ms", Float, nullable=False),
              Column("outcome", Text, nullable=False),
              Column("caller", Text, nullable=False))
