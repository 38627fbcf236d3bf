//! Placement: which cores each island gets. The unit is the physical core, so
//! SMT siblings always stay in one island.
//!
//! - grouped: islands are carved from a tree of free cores (socket → NUMA node
//!   → L3 → cores). At each level an island goes into the *smallest* child that
//!   still holds it (best fit, leaving big holes for big islands); only when no
//!   child can hold it does it take all of a child and go on with the rest:
//!   first the leftovers of children other islands already use (so scraps do
//!   not pile up for the last island), then the fullest untouched child. So an
//!   island never crosses a socket (or an L3) it could fit in, and one of k
//!   cores that cannot fit spans at most ceil(k / socket size) + 1 sockets.
//! - spread: cores are dealt round-robin across sockets, one core at a time,
//!   so an island of k cores spans min(k, sockets) sockets: the paper's worst case.

use std::collections::VecDeque;

use crate::topology::Topology;

/// A node of the free-core tree. Leaves hold cores; `free` counts the cores below.
struct Group {
    children: Vec<Group>,
    cores: VecDeque<usize>,
    free: usize,
    /// The free cores before any island took some.
    capacity: usize,
}

impl Group {
    fn leaf(cores: Vec<usize>) -> Group {
        Group {
            free: cores.len(),
            capacity: cores.len(),
            children: Vec::new(),
            cores: cores.into(),
        }
    }

    fn inner(children: Vec<Group>) -> Group {
        let children: Vec<Group> = children.into_iter().filter(|c| c.free > 0).collect();
        let free = children.iter().map(|c| c.free).sum();
        Group {
            free,
            capacity: free,
            children,
            cores: VecDeque::new(),
        }
    }

    /// Takes `n <= free` cores, as close together as the free space allows.
    fn take(&mut self, n: usize) -> Vec<usize> {
        assert!(n <= self.free, "take {n} of {} free cores", self.free);
        self.free -= n;
        if self.children.is_empty() {
            return self.cores.drain(..n).collect();
        }
        let mut out = Vec::with_capacity(n);
        let mut need = n;
        while need > 0 {
            // Best fit: the smallest child that holds the rest (first on ties).
            let fit = self
                .children
                .iter()
                .enumerate()
                .filter(|(_, c)| c.free >= need)
                .min_by_key(|(i, c)| (c.free, *i))
                .map(|(i, _)| i);
            let (i, k) = match fit {
                Some(i) => (i, need),
                None => {
                    // Nothing holds it: all of a child, leftovers of used
                    // children first, then the fullest (first on ties).
                    let i = self
                        .children
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| c.free > 0)
                        .max_by_key(|(i, c)| (c.free < c.capacity, c.free, std::cmp::Reverse(*i)))
                        .map(|(i, _)| i)
                        .expect("free > 0 implies a child with free cores");
                    (i, self.children[i].free)
                }
            };
            out.extend(self.children[i].take(k));
            need -= k;
        }
        out
    }
}

/// The free-core tree of the allowed cores: machine → socket → NUMA node → L3 → cores.
fn free_tree(t: &Topology, allowed: &[usize]) -> Group {
    let sockets = t
        .sockets()
        .iter()
        .map(|s| {
            let nodes = s
                .numa
                .iter()
                .map(|&n| {
                    let l3s = s
                        .l3s
                        .iter()
                        .map(|&l| {
                            Group::leaf(
                                t.l3_domains()[l]
                                    .cores
                                    .iter()
                                    .copied()
                                    .filter(|c| t.cores()[*c].numa == n && allowed.contains(c))
                                    .collect(),
                            )
                        })
                        .collect();
                    Group::inner(l3s)
                })
                .collect();
            Group::inner(nodes)
        })
        .collect();
    Group::inner(sockets)
}

/// Grouped placement of islands of `sizes` cores over the `allowed` cores.
/// Requires `sum(sizes) <= allowed.len()`.
pub(super) fn grouped(t: &Topology, allowed: &[usize], sizes: &[usize]) -> Vec<Vec<usize>> {
    let mut tree = free_tree(t, allowed);
    sizes.iter().map(|&n| tree.take(n)).collect()
}

/// Spread placement: cores dealt round-robin across sockets, one at a time.
/// Requires `sum(sizes) <= allowed.len()`.
pub(super) fn spread(t: &Topology, allowed: &[usize], sizes: &[usize]) -> Vec<Vec<usize>> {
    let mut per_socket: Vec<VecDeque<usize>> = t
        .sockets()
        .iter()
        .map(|s| {
            s.cores
                .iter()
                .copied()
                .filter(|c| allowed.contains(c))
                .collect()
        })
        .collect();
    let mut next = 0;
    let mut out = Vec::with_capacity(sizes.len());
    for &n in sizes {
        let mut island = Vec::with_capacity(n);
        for _ in 0..n {
            let s = (0..per_socket.len())
                .map(|k| (next + k) % per_socket.len())
                .find(|&s| !per_socket[s].is_empty())
                .expect("sizes fit in the allowed cores");
            island.extend(per_socket[s].pop_front());
            next = s + 1;
        }
        out.push(island);
    }
    out
}

/// Sizes of `n` islands over `cores` cores, differing by at most one (larger first).
pub(super) fn even_sizes(cores: usize, n: usize) -> Vec<usize> {
    (0..n)
        .map(|i| cores / n + usize::from(i < cores % n))
        .collect()
}
