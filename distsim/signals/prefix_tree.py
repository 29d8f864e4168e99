"""The prefix tree under the router's prefix index: runs of keys, each with the set of instances holding it.

One tree for the whole fleet. A node holds a run of consecutive keys of one prompt (a slice of it, kept as
the node's own tuple) and ``mask``, the bitmask of the instances that hold every key of the run; keys are
chained (each stands for its whole prefix, distsim.workload.keys), so a child is found by its first key and
a request matches a node up to its last equal key (the instance cache's ``matched``, same node layout).
Nodes split where a request diverges or ends inside a run, and where an instance's holding starts or ends
inside one, so that ownership is the same for every key of a node. A node nobody holds stays while nodes
below it are held (a *hole*: keys evicted head first leave the tail held, as in the per-key index) and
goes with its last child. A node and its only child merge again once they have the same holders and no
instance's run starts at the child (``heads``): else every partial eviction would leave a split behind
for good, and a shared prompt evicted and recorded again piece by piece would end as one node per key.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from distsim.instance.kv_cache import matched

_LEAF: dict[Hashable, Node] = {}  # a leaf's children (shared, never written: a first child gets a new dict)


class Node:
    """Keys ``src[off : off + n]`` ending ``depth`` keys from the root, held by the instances of ``mask``."""

    __slots__ = ("parent", "children", "src", "off", "n", "depth", "mask", "heads")

    def __init__(self, parent: Node | None, src: Sequence[Hashable], off: int, n: int, depth: int, mask: int):
        self.parent: Node = parent or self  # the root is its own parent (never followed)
        self.children = _LEAF
        self.src = src
        self.off = off
        self.n = n
        self.depth = depth
        self.mask = mask
        self.heads = 0  # runs (of any instance) that start at this node's first key


class KeyTree:
    __slots__ = ("root", "nodes")

    def __init__(self) -> None:
        self.root = Node(None, (), 0, 0, 0, 0)
        self.nodes = 0  # in the tree, the root left out

    def path(self, keys: Sequence[Hashable]) -> list[Node]:
        """The nodes that hold exactly ``keys`` from the root, in order: runs split where ``keys`` diverge
        from them or end, and a new leaf for what the tree lacks (held by nobody yet)."""
        node = self.root
        d = 0
        end = len(keys)
        path = []
        while d < end:
            children = node.children
            child = children.get(keys[d])
            if child is None:
                child = Node(node, tuple(keys[d:]), 0, end - d, end, 0)
                if children is _LEAF:
                    node.children = {keys[d]: child}
                else:
                    children[keys[d]] = child
                self.nodes += 1
                path.append(child)
                return path
            m = matched(child, keys, d, end)
            if m < child.n:
                child = self.split(child, m)
            path.append(child)
            node = child
            d += m
        return path

    def split(self, node: Node, m: int) -> Node:
        """Cut ``node`` after its first ``m`` keys; the head becomes a new node above it with the same
        owners and is returned. The tail keeps the object, so whatever names a node as the end of a run
        stays valid, and the head keeps the first key, so whatever finds a run by its first key does."""
        parent = node.parent
        head = Node(parent, node.src, node.off, m, node.depth - node.n + m, node.mask)
        head.heads, node.heads = node.heads, 0
        parent.children[node.src[node.off]] = head
        node.off += m
        node.n -= m
        head.children = {node.src[node.off]: node}
        node.parent = head
        self.nodes += 1
        return head

    def starting_at(self, end: Node, depth: int) -> Node:
        """The node on the way from the root to ``end`` that starts ``depth`` keys from the root
        (``depth`` below ``end.depth``), splitting the one that holds that depth inside it."""
        node = end
        while node.depth - node.n > depth:
            node = node.parent
        first = node.depth - node.n
        if first < depth:
            self.split(node, depth - first)
        return node

    def merge(self, node: Node) -> None:
        """Join ``node`` to its only child when they have the same holders and no run starts at the
        child: the child takes the keys and the place (it keeps its object, the end of any run that ends
        there; no run ends at ``node``, since its holders' runs go on into the child)."""
        children = node.children
        if len(children) != 1:
            return
        (child,) = children.values()
        if child.heads or child.mask != node.mask:
            return
        child.src = node.src[node.off : node.off + node.n] + child.src[child.off : child.off + child.n]
        child.off = 0
        child.n += node.n
        child.heads = node.heads
        parent = node.parent
        child.parent = parent
        parent.children[child.src[0]] = child
        self.nodes -= 1

    def prune(self, node: Node) -> None:
        """Take ``node`` out if nobody holds it and it has no children, and so on up its ancestors."""
        root = self.root
        while node is not root and not node.mask and not node.children:
            parent = node.parent
            del parent.children[node.src[node.off]]
            self.nodes -= 1
            node = parent
