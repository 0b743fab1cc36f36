"""The CQL the Cassandra store runs: its schema and its prepared statements.

See :mod:`dynaq.storage.cassandra` for why the tables look as they do.
Everything here blocks on the driver, so the store calls it from a worker
thread.
"""

from __future__ import annotations

from typing import Any


def create_schema(session: Any, ks: str, rf: int, messages_gc_grace_s: int) -> None:
    """Create the keyspace and tables if missing (blocking: call it off the event loop)."""
    session.execute(
        f'CREATE KEYSPACE IF NOT EXISTS "{ks}" WITH replication = '
        f"{{'class': 'SimpleStrategy', 'replication_factor': {rf}}}"
    )
    session.execute(
        f'CREATE TABLE IF NOT EXISTS "{ks}".messages (queue bigint, lane int, id bigint, '
        "value blob, version bigint, PRIMARY KEY ((queue, lane), id)) "
        "WITH CLUSTERING ORDER BY (id ASC) "
        f"AND gc_grace_seconds = {int(messages_gc_grace_s)} "
        "AND compaction = {'class': 'LeveledCompactionStrategy'}"
    )
    session.execute(
        f'CREATE TABLE IF NOT EXISTS "{ks}".directory (kind int, n bigint, PRIMARY KEY (kind, n))'
    )
    session.execute(
        f'CREATE TABLE IF NOT EXISTS "{ks}".kv (p int, k blob, value blob, version bigint, '
        "PRIMARY KEY (p, k)) WITH compaction = {'class': 'LeveledCompactionStrategy'}"
    )


class Statements:
    """The prepared statements of one session (preparing blocks: build it off the event loop)."""

    def __init__(self, session: Any, ks: str) -> None:
        p = session.prepare
        m, kv, d = f'"{ks}".messages', f'"{ks}".kv', f'"{ks}".directory'
        # Every read returns ``version`` last: rows whose version is null
        # are a bare row marker left by a conditional insert, i.e. absent.
        self.m_get = p(f"SELECT id, value, version FROM {m} WHERE queue=? AND lane=? AND id IN ?")
        self.m_ver = p(f"SELECT id, version FROM {m} WHERE queue=? AND lane=? AND id IN ?")
        self.m_scan = p(
            f"SELECT id, value, version FROM {m} WHERE queue=? AND lane=? AND id>=? AND id<=? "
            "LIMIT ?"
        )
        self.m_keys = p(
            f"SELECT id, version FROM {m} WHERE queue=? AND lane=? AND id>=? AND id<=? LIMIT ?"
        )
        self.m_last = p(
            f"SELECT id, version FROM {m} WHERE queue=? AND lane=? AND id>=? AND id<=? "
            "ORDER BY id DESC LIMIT ?"
        )
        self.m_put = p(f"UPDATE {m} SET value=?, version=? WHERE queue=? AND lane=? AND id=?")
        self.m_del = p(f"DELETE value, version FROM {m} WHERE queue=? AND lane=? AND id=?")
        self.m_put_new = p(
            f"INSERT INTO {m} (queue, lane, id, value, version) VALUES (?,?,?,?,?) IF NOT EXISTS"
        )
        self.m_put_bare = p(
            f"UPDATE {m} SET value=?, version=? WHERE queue=? AND lane=? AND id=? IF version=null"
        )
        self.m_put_ver = p(
            f"UPDATE {m} SET value=?, version=? WHERE queue=? AND lane=? AND id=? IF version=?"
        )
        self.d_add = p(f"INSERT INTO {d} (kind, n) VALUES (?, ?)")
        self.d_list = p(f"SELECT n FROM {d} WHERE kind=? AND n>=? AND n<=?")
        self.kv_get = p(f"SELECT k, value, version FROM {kv} WHERE p=? AND k IN ?")
        self.kv_ver = p(f"SELECT k, version FROM {kv} WHERE p=? AND k IN ?")
        self.kv_scan = p(f"SELECT k, value, version FROM {kv} WHERE p=? AND k>=? AND k<? LIMIT ?")
        self.kv_scan_open = p(f"SELECT k, value, version FROM {kv} WHERE p=? AND k>=? LIMIT ?")
        self.kv_keys = p(f"SELECT k, version FROM {kv} WHERE p=? AND k>=? AND k<? LIMIT ?")
        self.kv_keys_open = p(f"SELECT k, version FROM {kv} WHERE p=? AND k>=? LIMIT ?")
        self.kv_put = p(f"UPDATE {kv} SET value=?, version=? WHERE p=? AND k=?")
        self.kv_put_ttl = p(f"UPDATE {kv} USING TTL ? SET value=?, version=? WHERE p=? AND k=?")
        self.kv_del = p(f"DELETE value, version FROM {kv} WHERE p=? AND k=?")
        self.kv_del_ver = p(f"DELETE value, version FROM {kv} WHERE p=? AND k=? IF version=?")
        self.kv_put_new = p(
            f"INSERT INTO {kv} (p, k, value, version) VALUES (?,?,?,?) IF NOT EXISTS"
        )
        self.kv_put_bare = p(
            f"UPDATE {kv} SET value=?, version=? WHERE p=? AND k=? IF version=null"
        )
        self.kv_put_ver = p(f"UPDATE {kv} SET value=?, version=? WHERE p=? AND k=? IF version=?")
