"""Random aggregate and request ids: uuid4's guarantees from a buffered CSPRNG read."""

from __future__ import annotations

import os
from uuid import UUID

from bootstrap import install_process_hooks
from domain.ids import random_id


def test_ids_are_distinct_version_4_uuids() -> None:
    ids = [random_id() for _ in range(5000)]  # many refills of the buffer
    assert len(set(ids)) == len(ids)
    assert all(i.version == 4 and i.variant == "specified in RFC 4122" for i in ids)


def test_a_forked_child_never_repeats_its_parents_ids() -> None:
    install_process_hooks()  # as every process's composition root does
    random_id()  # the parent holds a partly used buffer
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report its next ids, then leave without running pytest's exit
        os.close(read)
        os.write(write, b"".join(random_id().bytes for _ in range(10)))
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 4096):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    child = {UUID(bytes=data[i : i + 16]) for i in range(0, len(data), 16)}
    parent = {random_id() for _ in range(10)}
    assert len(child) == 10 and not child & parent
