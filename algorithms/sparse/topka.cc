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

class TopkA final : public Algorithm {
 public:
  Status allreduce(Context& ctx, const AllreduceArgs& args) override {
    SparseParams params;
    GC_CHECK(params.read(ctx.config));
    bool compress = false;
    GC_CHECK(frame_.begin(ctx, args, params.warmupCalls, &compress));
    if (!compress) return Status::Ok();
    const int P = ctx.net.size(), me = ctx.net.rank();
    const size_t n = args.count, k = topkCount(params.density, n);
    std::vector<float>& acc = frame_.acc();

    Coo mine;
    GC_CHECK(selectTopk(ctx.dev, acc.data(), n, k, 0, &mine));
    std::vector<std::vector<uint8_t>> blocks(P);
    GC_CHECK(encodeSparse(ctx.dev, mine.idx.data(), mine.val.data(), mine.size(), 0, n,
                          &blocks[me]));
    GC_CHECK(allgatherBlocks(ctx, kStepGather, std::vector<size_t>(P, wireBound(n, k)), &blocks));

    result_.assign(n, 0.0f);
    Coo in;
    in.idx.resize(k);
    in.val.resize(k);
    for (int r = 0; r < P; ++r) {
      size_t got = 0, used = 0;
      GC_CHECK(decodeSparse(ctx.dev, blocks[r].data(), blocks[r].size(), 0, n, in.idx.data(),
                            in.val.data(), k, &got, &used));
      GC_REQUIRE(used == blocks[r].size(), Err::RemoteError,
                 "topka: rank %d's message has %zu bytes after its end", r, blocks[r].size() - used);
      GC_CHECK(ctx.dev.scatterAdd(result_.data(), n, 0, in.idx.data(), in.val.data(), got));
    }
    GC_CHECK(ctx.dev.scatterZero(acc.data(), n, 0, mine.idx.data(), mine.size()));
    return frame_.finish(ctx, args, result_.data());
  }

 private:
  SparseFrame frame_;
  std::vector<float> result_;
};

class TopkAReference final : public Reference {
 public:
  explicit TopkAReference(int nranks) : frame_(nranks) {}
  Status configure(const param::Overrides& config) override { return frame_.configure(config); }
  Status expect(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                std::vector<double>* expected, std::vector<double>* tolerance) override {
    bool compress = false;
    GC_CHECK(frame_.begin(inputs, args, &compress, expected, tolerance));
    if (!compress) return Status::Ok();
    device::Backend& cpu = device::cpuBackend();
    const size_t n = args.count, k = topkCount(frame_.params().density, n);
    std::vector<float> sum(n, 0.0f);
    for (int r = 0; r < frame_.nranks(); ++r) {
      Coo sel;
      GC_CHECK(selectTopk(cpu, frame_.acc(r).data(), n, k, 0, &sel));
      GC_CHECK(cpu.scatterAdd(sum.data(), n, 0, sel.idx.data(), sel.val.data(), sel.size()));
      GC_CHECK(cpu.scatterZero(frame_.acc(r).data(), n, 0, sel.idx.data(), sel.size()));
    }
    return frame_.finish(args, sum, expected, tolerance);
  }

 private:
  ReferenceFrame frame_;
};

}  // namespace

GC_REGISTER_ALGORITHM(topka, {
    "topka",
    "TopkA: allgather of every rank's exact top-k (COO/DenseStream/dense per message), summed; "
    "error feedback",
    {param::Id::DENSITY, param::Id::WARMUP_CALLS},
    [] { return std::unique_ptr<Algorithm>(new TopkA()); },
    [](int nranks) { return std::unique_ptr<Reference>(new TopkAReference(nranks)); },
});

}  // namespace gradcomp::algo::sparse
