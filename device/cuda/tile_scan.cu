// The middle step of kernel_common.cuh's reduce-then-scan.
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device::cuda {
namespace {

constexpr int kScanThreads = 1024;

__global__ void scanTilesKernel(Pair* tiles, size_t count, Pair* total) {
  using Scan = cub::BlockScan<Pair, kScanThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const size_t per = (count + kScanThreads - 1) / kScanThreads;
  const size_t first = size_t(threadIdx.x) * per;
  const size_t begin = first < count ? first : count;
  const size_t end = begin + per < count ? begin + per : count;
  Pair mine{0, 0};
  for (size_t t = begin; t < end; ++t) mine = PairSum()(mine, tiles[t]);
  Pair before, all;
  Scan(tmp).ExclusiveScan(mine, before, Pair{0, 0}, PairSum(), all);
  for (size_t t = begin; t < end; ++t) {
    const Pair v = tiles[t];
    tiles[t] = before;
    before = PairSum()(before, v);
  }
  if (threadIdx.x == 0) *total = all;
}

}  // namespace

void launchScanTiles(Pair* tiles, size_t count, Pair* total, cudaStream_t stream) {
  scanTilesKernel<<<1, kScanThreads, 0, stream>>>(tiles, count, total);
}

}  // namespace gradcomp::device::cuda
