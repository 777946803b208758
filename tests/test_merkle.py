"""RFC 6962 tree math against published test vectors, and proofs at every small size."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from domain.merkle import (
    EMPTY_ROOT,
    CompactRange,
    Node,
    ProofError,
    consistency_proof,
    from_stored,
    inclusion_proof,
    is_stored,
    leaf_hash,
    node_hash,
    root_from_inclusion,
    root_hash,
    verify_consistency,
    verify_inclusion,
)

# From transparency-dev/merkle, proof/verify_test.go (the RFC 6962 reference vectors also
# used by Certificate Transparency): eight leaves, the roots of trees of size 1..8, and
# inclusion proofs (leaf numbered from 1 there) and consistency proofs between sizes.
LEAVES = [bytes.fromhex(h) for h in (
    "", "00", "10", "2021", "3031", "40414243", "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
)]  # fmt: skip
ROOTS = [bytes.fromhex(h) for h in (
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
)]  # fmt: skip
INCLUSION = [
    (1, 1, []),
    (1, 8, [
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    ]),
    (6, 8, [
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    ]),
    (3, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (2, 5, [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    ]),
]  # fmt: skip
CONSISTENCY = [
    (1, 1, []),
    (1, 8, [
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    ]),
    (6, 8, [
        "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    ]),
    (2, 5, [
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    ]),
    (6, 7, [
        "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
        "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    ]),
]  # fmt: skip


class Tree:
    """Every complete subtree kept as it forms, as the read model keeps them."""

    def __init__(self, leaves: Iterable[bytes]) -> None:
        self.nodes: dict[Node, bytes] = {}
        self.edge = CompactRange()
        for data in leaves:
            self.nodes.update(self.edge.append(leaf_hash(data)))

    def read(self, wanted: Iterable[Node]) -> Mapping[Node, bytes]:
        return {node: self.nodes[node] for node in wanted}


def mth(hashes: list[bytes]) -> bytes:
    """RFC 6962 2.1 MTH, by its recursive definition."""
    if not hashes:
        return EMPTY_ROOT
    if len(hashes) == 1:
        return hashes[0]
    k = 1 << ((len(hashes) - 1).bit_length() - 1)
    return node_hash(mth(hashes[:k]), mth(hashes[k:]))


def test_roots_of_the_reference_tree_at_every_size() -> None:
    tree = Tree(LEAVES)
    assert root_hash(0, tree.read) == EMPTY_ROOT
    assert [root_hash(n, tree.read) for n in range(1, 9)] == ROOTS
    assert CompactRange().root() == EMPTY_ROOT
    assert Tree(LEAVES[:5]).edge.root() == ROOTS[4]


@pytest.mark.parametrize(("leaf", "size", "path"), INCLUSION)
def test_inclusion_proofs_equal_reference_vectors(leaf: int, size: int, path: list[str]) -> None:
    proof = inclusion_proof(leaf - 1, size, Tree(LEAVES).read)
    assert proof == [bytes.fromhex(h) for h in path]
    verify_inclusion(leaf - 1, size, leaf_hash(LEAVES[leaf - 1]), proof, ROOTS[size - 1])


@pytest.mark.parametrize(("old", "new", "path"), CONSISTENCY)
def test_consistency_proofs_equal_reference_vectors(old: int, new: int, path: list[str]) -> None:
    proof = consistency_proof(old, new, Tree(LEAVES).read)
    assert proof == [bytes.fromhex(h) for h in path]
    verify_consistency(old, new, ROOTS[old - 1], ROOTS[new - 1], proof)


def test_every_proof_of_small_trees_verifies_and_any_corruption_fails() -> None:
    data = [b"event %d" % i for i in range(70)]
    tree = Tree(data)
    hashes = [leaf_hash(d) for d in data]
    for size in range(1, 71):
        root = mth(hashes[:size])
        assert root_hash(size, tree.read) == root
        for index in range(size):
            proof = inclusion_proof(index, size, tree.read)
            verify_inclusion(index, size, hashes[index], proof, root)
            for bad in (proof[:-1], [*proof, root], [h[::-1] for h in proof[:1]] + proof[1:]):
                if bad != proof:
                    with pytest.raises(ProofError):
                        verify_inclusion(index, size, hashes[index], bad, root)
            if size > 1:
                with pytest.raises(ProofError):
                    verify_inclusion((index + 1) % size, size, hashes[index], proof, root)
        for old in range(1, size):
            proof = consistency_proof(old, size, tree.read)
            old_root = mth(hashes[:old])
            verify_consistency(old, size, old_root, root, proof)
            with pytest.raises(ProofError):
                verify_consistency(old, size, root, old_root, proof)
            with pytest.raises(ProofError):
                verify_consistency(old, size, old_root, root, proof[:-1])


def test_arguments_no_proof_can_have_are_refused() -> None:
    tree = Tree(LEAVES)
    with pytest.raises(ProofError, match="not in a tree of size 3"):
        inclusion_proof(3, 3, tree.read)
    with pytest.raises(ProofError, match="from size 5 to size 4"):
        consistency_proof(5, 4, tree.read)
    with pytest.raises(ProofError):
        root_from_inclusion(0, 0, ROOTS[0], [])
    with pytest.raises(ProofError, match="empty"):
        verify_consistency(1, 2, ROOTS[0], ROOTS[1], [])


def test_proofs_from_the_stored_levels_alone_equal_proofs_from_every_subtree() -> None:
    hashes = [leaf_hash(b"event %d" % i) for i in range(300)]
    every, kept = Tree([]), CompactRange()
    stored: dict[Node, bytes] = {}
    for index, h in enumerate(hashes):
        every.nodes.update(every.edge.append(h))
        stored[(0, index)] = h
        stored.update(kept.append_stored(h))
    assert all(is_stored(level) for level, _ in stored)
    assert len(stored) - len(hashes) == 300 // 16 + 300 // 256  # levels 4 and 8
    read = from_stored(lambda wanted: {node: stored[node] for node in wanted})
    for size in (1, 15, 16, 17, 255, 256, 257, 300):
        assert root_hash(size, read) == root_hash(size, every.read) == mth(hashes[:size])
        for index in {0, size // 2, size - 1}:
            assert inclusion_proof(index, size, read) == inclusion_proof(index, size, every.read)
        for old in {1, size // 3, size - 1} - {0}:
            assert consistency_proof(old, size, read) == consistency_proof(old, size, every.read)
    assert kept.root() == every.edge.root()
