// gTop-k sparse allreduce (Shi et al., ICDCS'19; the gTopk baseline of Ok-Topk
// Table 1, algorithms.md section 2). Every rank selects its exact top-k; the
// k-sparse vectors are merged pairwise along a recursive-doubling tree, each
// merge keeping the exact top-k of the pairwise sum, so every round moves O(k)
// words and all ranks end with the same k-sparse vector.
//
// Tree (shared by the schedule in gtopk.cc and the central reference):
// - P2 = largest power of two <= P. A rank r >= P2 ("extra") first sends its
//   selection to r - P2, which folds it in (merge), and receives the final
//   vector at the end (together with the set of its own entries that survived).
// - Rounds d = 1, 2, 4, ..., P2/2: rank r < P2 exchanges its current vector
//   with r XOR d and keeps merge(mine, theirs).
// - merge(a, b) = Topk_k(a + b) on sorted COO lists; the sum at a shared index
//   is a + b, and fp32 addition is commutative bit for bit, so both partners
//   compute identical vectors and all ranks end bit-identical.
//
// Error feedback (decision, exact conservation): a rank's entry at index i
// "survives" while every merge on its path keeps i. The value at i in a merged
// vector is exactly the sum of the surviving entries below it, so a rank's
// contribution is its local selection restricted to the indexes that survived
// every merge it took part in (local AND kept_fold AND kept_1 ... AND kept_L).
// This is stricter than "local AND final": an index can be dropped in one
// subtree and still reach the result through another; the dropped entries
// stay in the residual in full, so sum_r acc_r = u + sum_r residual_r.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/sparse/sparse_common.h"

namespace gradcomp::algo::sparse::gtopk {

// Largest power of two <= P (P >= 1).
int treeSize(int P);

// *out = Topk_k(a + b) (sorted COO; exact zeros never kept).
Status mergeTopk(device::Backend& dev, const Coo& a, const Coo& b, size_t k, Coo* out);

// alive = alive AND kept (both sorted index lists, device memory). One sync.
Status keepSurvivors(device::Backend& dev, const device::DeviceArray<uint64_t>& kept,
                     device::DeviceArray<uint64_t>* alive);

}  // namespace gradcomp::algo::sparse::gtopk
