// TopkA (Ok-Topk Table 1): every rank selects its exact top-k, the COO lists
// are allgathered (each message in its smallest wire format) and summed in
// rank order. Result: sum_i Topk_k(acc_i); everything selected is
// contributed, so the residual is acc with the selection zeroed.
// Volume ~2k(P-1) words per rank.
#include "algorithms/sparse/collectives.h"
#include "algorithms/sparse/reference_frame.h"
#include "algorithms/sparse/sparse_common.h"
#include "algorithms/sparse/wire_format.h"

namespace gradcomp::algo::sparse {
namespace {

constexpr uint64_t kStepGather = 0;

class TopkA final : public SparseAlgorithm {
  Status schedule(Context& ctx, const AllreduceArgs& args, const SparseParams&, size_t k,
                  float* acc, const FrameStats&, float* result) override {
    device::Backend& dev = ctx.dev;
    const int P = ctx.net.size(), me = ctx.net.rank();
    const size_t n = args.count;

    // Everything selected is contributed: the selection zeroes it in acc.
    Coo mine(dev);
    GC_CHECK(selectTopk(dev, acc, n, k, 0, &mine, nullptr, /*zeroSelected=*/true));
    std::vector<Bytes> blocks = bytesOn(dev, P);
    GC_CHECK(encodeSparse(dev, SparsePiece{&mine, 0, mine.size(), 0, n}, &blocks[me]));
    GC_CHECK(allgatherBlocks(ctx, kStepGather, std::vector<size_t>(P, wireBound(n, k)), &blocks));

    Coo in(dev);
    in.resize(k);
    for (int r = 0; r < P; ++r) {
      size_t got = 0, used = 0;
      GC_CHECK(decodeSparse(dev, blocks[r].data(), blocks[r].size(), 0, n, in.idx.data(),
                            in.val.data(), k, r, &got, &used));
      GC_REQUIRE(used == blocks[r].size(), Err::RemoteError,
                 "topka: rank %d's message has %zu bytes after its end", r, blocks[r].size() - used);
      GC_CHECK(dev.scatterAdd(result, n, 0, in.idx.data(), in.val.data(), got));
    }
    return dev.sync();  // the decodes read `blocks`
  }
};

class TopkAReference final : public SparseReference {
 public:
  using SparseReference::SparseReference;

 private:
  Status schedule(const AllreduceArgs& args, size_t k, std::vector<float>& sum) override {
    device::Backend& cpu = device::cpuBackend();
    const size_t n = args.count;
    for (int r = 0; r < frame().nranks(); ++r) {
      Coo sel;
      GC_CHECK(selectTopk(cpu, frame().acc(r), n, k, 0, &sel));
      GC_CHECK(cpu.scatterAdd(sum.data(), n, 0, sel.idx.data(), sel.val.data(), sel.size()));
      GC_CHECK(cpu.scatterZero(frame().acc(r), n, 0, sel.idx.data(), sel.size()));
    }
    return Status::Ok();
  }
};

}  // namespace

GC_REGISTER_ALGORITHM(topka, {
    "topka",
    "TopkA: allgather of every rank's exact top-k (COO/DenseStream/dense per message), summed; "
    "error feedback",
    {param::Id::DENSITY, param::Id::WARMUP_CALLS, param::Id::EF},
    [] { return std::unique_ptr<Algorithm>(new TopkA()); },
    [](int nranks) { return std::unique_ptr<Reference>(new TopkAReference(nranks)); },
});

}  // namespace gradcomp::algo::sparse
