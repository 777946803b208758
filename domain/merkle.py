"""RFC 6962 Merkle tree math over the log: hashes, proofs from stored subtrees, verification.

One leaf per recorded event, in log order (leaf index = the event's sequence number
minus one, positions may have gaps). The leaf's input is what the hash chain hashes of
the event (domain/log_chain.py) minus the previous link: the header
`[position,"aggregate-id",version,"Type"]`, a newline, then the payload exactly as stored.

Proofs are built from complete subtrees only: every node an RFC 6962 audit path needs is
the hash of a range [a, b) of leaves; that range splits into at most log2(n) complete,
aligned subtrees (`level`, `index`: leaves [index * 2**level, (index + 1) * 2**level)),
which never changes once complete. A store need not keep every one of them: it keeps the
leaves and the subtrees of every `STRIDE`th level (`is_stored`), and `from_stored` derives
any other complete subtree from the at most 2**(STRIDE - 1) stored ones it is made of. So a
proof at any tree size is one batch of reads, whatever the size.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence

from domain.log_chain import chain_header

Node = tuple[int, int]  # (level, index) of a complete subtree
# Reads the hashes of complete subtrees; every requested node must be in the answer.
NodeReader = Callable[[Iterable[Node]], Mapping[Node, bytes]]

EMPTY_ROOT = hashlib.sha256(b"").digest()

# The levels of complete subtrees a store keeps: the leaves and every 4th level above.
# Keeping every level costs a row per event on average; every 4th, one per 15 events,
# and a subtree of another level is then at most 8 stored ones (7 hashes) away.
STRIDE = 4


class ProofError(ValueError):
    """A proof that does not verify, or arguments no proof can have."""


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def event_leaf(position: int, aggregate_id: str, version: int, type_: str, payload: bytes) -> bytes:
    """The leaf input of one stored event (see the module docstring)."""
    return chain_header(position, aggregate_id, version, type_).encode() + b"\n" + payload


def _split(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


def range_nodes(lo: int, hi: int) -> list[Node]:
    """The complete subtrees that make up leaves [lo, hi), left to right.

    Only for the ranges RFC 6962 hashes (lo a multiple of a power of two at least
    hi - lo), whose hash is then the right fold of these nodes' hashes.
    """
    nodes: list[Node] = []
    while lo < hi:
        level = (hi - lo).bit_length() - 1
        nodes.append((level, lo >> level))
        lo += 1 << level
    return nodes


def is_stored(level: int) -> bool:
    """Whether a store keeps the complete subtrees of this level (see STRIDE)."""
    return level % STRIDE == 0


def stored_under(node: Node) -> list[Node]:
    """The stored complete subtrees a complete subtree is made of, left to right."""
    level, index = node
    base = level - level % STRIDE
    span = 1 << (level - base)
    return [(base, i) for i in range(index * span, (index + 1) * span)]


def from_stored(read_stored: NodeReader) -> NodeReader:
    """A reader of any complete subtree, over one that reads only stored ones (one call)."""

    def read(nodes: Iterable[Node]) -> Mapping[Node, bytes]:
        wanted = {node: stored_under(node) for node in nodes}
        found = read_stored({part for parts in wanted.values() for part in parts})
        return {node: _complete([found[p] for p in parts]) for node, parts in wanted.items()}

    return read


def _complete(hashes: Sequence[bytes]) -> bytes:
    """The hash of a complete subtree from its 2**k aligned parts, left to right."""
    level = list(hashes)
    while len(level) > 1:
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def _fold(hashes: Sequence[bytes]) -> bytes:
    root = hashes[-1]
    for h in reversed(hashes[:-1]):
        root = node_hash(h, root)
    return root


def _inclusion_ranges(index: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """RFC 6962 2.1.1 PATH(m, D[lo:hi]) as the leaf ranges whose hashes it lists."""
    ranges: list[tuple[int, int]] = []
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            ranges.append((lo + k, hi))
            hi = lo + k
        else:
            ranges.append((lo, lo + k))
            lo = lo + k
    ranges.reverse()
    return ranges


def _consistency_ranges(m: int, n: int) -> list[tuple[int, int]]:
    """RFC 6962 2.1.2 PROOF(m, D[n]) = SUBPROOF(m, D[n], true) as leaf ranges."""
    ranges: list[tuple[int, int]] = []
    lo, hi, complete = 0, n, True
    while m != hi - lo:
        k = _split(hi - lo)
        if m <= k:
            ranges.append((lo + k, hi))
            hi = lo + k
        else:
            ranges.append((lo, lo + k))
            m -= k
            lo, complete = lo + k, False
    if not complete:
        ranges.append((lo, hi))
    ranges.reverse()
    return ranges


def _hashes_of(ranges: Sequence[tuple[int, int]], read: NodeReader) -> list[bytes]:
    wanted = [range_nodes(lo, hi) for lo, hi in ranges]
    found = read({node for nodes in wanted for node in nodes})
    return [_fold([found[node] for node in nodes]) for nodes in wanted]


def root_hash(size: int, read: NodeReader) -> bytes:
    """MTH of the first `size` leaves."""
    return EMPTY_ROOT if size == 0 else _hashes_of([(0, size)], read)[0]


def inclusion_proof(index: int, size: int, read: NodeReader) -> list[bytes]:
    """The audit path of leaf `index` in the tree of `size` leaves."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is not in a tree of size {size}")
    return _hashes_of(_inclusion_ranges(index, 0, size), read)


def consistency_proof(old: int, new: int, read: NodeReader) -> list[bytes]:
    """The proof that the tree of `old` leaves is a prefix of the tree of `new` leaves."""
    if not 0 <= old <= new:
        raise ProofError(f"no consistency proof from size {old} to size {new}")
    if old in (0, new):
        return []
    return _hashes_of(_consistency_ranges(old, new), read)


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """RFC 9162 2.1.3.2: the root an inclusion proof leads to; ProofError if malformed."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is not in a tree of size {size}")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofError("inclusion proof has more hashes than the tree has levels")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("inclusion proof has fewer hashes than the tree has levels")
    return r


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Raise ProofError unless the proof places the leaf hash at `index` under `root`."""
    if root_from_inclusion(index, size, leaf, proof) != root:
        raise ProofError(f"inclusion proof of leaf {index} does not lead to the root")


def verify_consistency(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162 2.1.4.2: raise ProofError unless the proof links the two roots."""
    if not 0 <= old <= new:
        raise ProofError(f"no consistency proof from size {old} to size {new}")
    if old == new or old == 0:
        if proof:
            raise ProofError("consistency proof must be empty for these sizes")
        if old == new and old_root != new_root:
            raise ProofError("equal sizes with different roots")
        return
    if not proof:
        raise ProofError("consistency proof is empty")
    path = list(proof)
    if old & (old - 1) == 0:  # a power of two: the old root is the first node
        path.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("consistency proof has more hashes than the tree has levels")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("consistency proof has fewer hashes than the tree has levels")
    if fr != old_root:
        raise ProofError(f"consistency proof does not lead to the root of size {old}")
    if sr != new_root:
        raise ProofError(f"consistency proof does not lead to the root of size {new}")


class CompactRange:
    """The right edge of a growing tree: one complete subtree per set bit of its size.

    Appending a leaf yields the complete subtrees it completes, so a store can keep every
    complete subtree as it is formed; the root at any moment is the fold of the edge.
    """

    def __init__(self, size: int = 0, edge: Sequence[bytes] = ()) -> None:
        self.size = size
        self.edge = list(edge)  # highest level first, as range_nodes(0, size) lists them

    def append(self, leaf: bytes) -> list[tuple[Node, bytes]]:
        """Add a leaf hash; the complete subtrees it formed, the leaf itself first."""
        index, level, h = self.size, 0, leaf
        formed = [((0, index), leaf)]
        while index & 1:
            h = node_hash(self.edge.pop(), h)
            index, level = index >> 1, level + 1
            formed.append(((level, index), h))
        self.edge.append(h)
        self.size += 1
        return formed

    def append_stored(self, leaf: bytes) -> list[tuple[Node, bytes]]:
        """`append`, listing only the subtrees formed above the leaves that a store keeps."""
        index, level, h, edge = self.size, 0, leaf, self.edge
        formed = []
        while index & 1:
            h = node_hash(edge.pop(), h)
            index, level = index >> 1, level + 1
            if level % STRIDE == 0:
                formed.append(((level, index), h))
        edge.append(h)
        self.size += 1
        return formed

    def append_leaf(self, leaf: bytes) -> None:
        """`append` without listing what formed (for recomputing a root only)."""
        index, h, edge = self.size, leaf, self.edge
        while index & 1:
            h = node_hash(edge.pop(), h)
            index >>= 1
        edge.append(h)
        self.size += 1

    def root(self) -> bytes:
        return EMPTY_ROOT if self.size == 0 else _fold(self.edge)
