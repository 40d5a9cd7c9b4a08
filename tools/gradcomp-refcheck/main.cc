// gradcomp-refcheck: replays a recorded allreduce sequence through the
// algorithm's Reference and checks every rank's output, as gradcomp-bench -c 1
// does for its own runs (the same Checker). It checks runs gradcomp did not
// drive itself: PyTorch ranks under LD_PRELOAD=libgradcomp.so on a GPU
// (tools/device/nccl_driver.py --phases record writes the recording).
//
//   gradcomp-refcheck [--algo NAME] DIR
//
// DIR/manifest.txt, one directive per line ('#' starts a comment):
//   algo NAME                 the algorithm the run used (--algo overrides it)
//   nranks P
//   env GRADCOMP_X=VALUE      the run's GRADCOMP_* variables; those naming a
//                             registry parameter configure the Reference
//   call I KEY DTYPE OP COUNT [CHOICE]
//                             one compressed call, in the order the ranks made
//                             them; KEY names the logical tensor (calls with
//                             the same KEY share error feedback and state);
//                             CHOICE (required for algo auto): what the call
//                             ran, as gcCommLastAlgorithm reported it
//                             ("oktopk", "dense(flush)")
// and for every call I and rank R the raw bytes DIR/rank<R>.call<I>.in (the
// rank's input) and .out (its result), COUNT elements of DTYPE each.
//
// Every rank's output is checked against the Reference fed with every rank's
// input, call after call, so stateful algorithms (residuals, thresholds) are
// followed exactly. Prints one line per call; exit 0 when every element of
// every rank is within the Reference's tolerance, 1 when some are not, 2 when
// the recording or the arguments are unusable (the line says what).
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/dtype.h"
#include "common/param.h"
#include "tools/gradcomp-bench/check.h"

namespace {

using namespace gradcomp;

struct Call {
  int index = 0;
  uint64_t key = 0;
  DataType dtype = DataType::Float32;
  RedOp op = RedOp::Sum;
  size_t count = 0;
  std::string choice;  // auto: what the call ran
};

struct Manifest {
  std::string algo;
  int nranks = 0;
  param::Overrides config;
  std::vector<Call> calls;
};

Status parseManifest(const std::string& dir, Manifest* m) {
  const std::string path = dir + "/manifest.txt";
  std::ifstream in(path);
  GC_REQUIRE(in.good(), Err::InvalidArgument, "cannot read %s", path.c_str());
  std::string line;
  for (int lineNo = 1; std::getline(in, line); ++lineNo) {
    const std::string where = path + ":" + std::to_string(lineNo);
    std::istringstream words(line);
    std::string word;
    if (!(words >> word) || word[0] == '#') continue;
    if (word == "algo") {
      words >> m->algo;
    } else if (word == "nranks") {
      words >> m->nranks;
      GC_REQUIRE(m->nranks > 0, Err::InvalidArgument, "%s: bad nranks", where.c_str());
    } else if (word == "env") {
      std::string assignment;
      words >> assignment;
      const size_t eq = assignment.find('=');
      const std::string prefix = "GRADCOMP_";
      GC_REQUIRE(eq != std::string::npos && assignment.rfind(prefix, 0) == 0,
                 Err::InvalidArgument, "%s: expected env GRADCOMP_NAME=VALUE", where.c_str());
      const std::string name = assignment.substr(prefix.size(), eq - prefix.size());
      if (param::find(name)) GC_CHECK(m->config.set(name, assignment.substr(eq + 1), where));
    } else if (word == "call") {
      Call c;
      std::string dtype, op;
      GC_REQUIRE(bool(words >> c.index >> c.key >> dtype >> op >> c.count), Err::InvalidArgument,
                 "%s: expected call INDEX KEY DTYPE OP COUNT", where.c_str());
      words >> c.choice;  // optional
      GC_CHECK(parseDtype(dtype, where, &c.dtype));
      GC_CHECK(parseRedOp(op, where, &c.op));
      m->calls.push_back(c);
    } else {
      return makeStatus(Err::InvalidArgument, "%s: unknown directive '%s'", where.c_str(),
                        word.c_str());
    }
  }
  GC_REQUIRE(m->nranks > 0, Err::InvalidArgument, "%s: no nranks line", path.c_str());
  GC_REQUIRE(!m->calls.empty(), Err::InvalidArgument, "%s: no calls", path.c_str());
  return Status::Ok();
}

Status readExact(const std::string& path, size_t bytes, std::vector<char>* out) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  GC_REQUIRE(in.good(), Err::InvalidArgument, "cannot read %s", path.c_str());
  const auto size = static_cast<size_t>(in.tellg());
  GC_REQUIRE(size == bytes, Err::InvalidArgument, "%s has %zu bytes, the manifest says %zu",
             path.c_str(), size, bytes);
  out->resize(bytes);
  in.seekg(0);
  in.read(out->data(), std::streamsize(bytes));
  GC_REQUIRE(in.good(), Err::SystemError, "short read of %s", path.c_str());
  return Status::Ok();
}

// One Checker per rank: each sees every call, so each Reference evolves as
// the distributed algorithm's state did, and compares that rank's output.
Status replay(const std::string& dir, const Manifest& m, const algo::AlgorithmInfo& info,
              uint64_t* wrongTotal) {
  std::vector<std::unique_ptr<bench::Checker>> checkers;
  for (int r = 0; r < m.nranks; ++r) {
    checkers.push_back(std::make_unique<bench::Checker>(info, m.nranks));
    GC_CHECK(checkers.back()->configure(m.config));
  }
  std::vector<std::vector<char>> inputs(size_t(m.nranks)), outputs(size_t(m.nranks));
  for (const Call& c : m.calls) {
    const size_t bytes = c.count * dtypeSize(c.dtype);
    std::vector<const void*> ptrs;
    for (int r = 0; r < m.nranks; ++r) {
      const std::string stem = dir + "/rank" + std::to_string(r) + ".call" + std::to_string(c.index);
      GC_CHECK(readExact(stem + ".in", bytes, &inputs[size_t(r)]));
      GC_CHECK(readExact(stem + ".out", bytes, &outputs[size_t(r)]));
      ptrs.push_back(inputs[size_t(r)].data());
    }
    algo::AllreduceArgs args;
    args.count = c.count;
    args.dtype = c.dtype;
    args.op = c.op;
    args.bufferKey = c.key;
    std::string wrongText, errText;
    uint64_t wrongCall = 0;
    for (int r = 0; r < m.nranks; ++r) {
      bench::CallCheck result;
      GC_REQUIRE(m.algo != "auto" || !c.choice.empty(), Err::InvalidArgument,
                 "call %d: algo auto needs the call's CHOICE (call I KEY DTYPE OP COUNT CHOICE)",
                 c.index);
      GC_CHECK(checkers[size_t(r)]->recordChoice(c.choice));
      GC_CHECK(checkers[size_t(r)]->checkCall(ptrs, args, outputs[size_t(r)].data(), r, &result));
      wrongCall += result.wrong;
      char buf[64];
      snprintf(buf, sizeof buf, "%s%llu", r ? " " : "", (unsigned long long)result.wrong);
      wrongText += buf;
      snprintf(buf, sizeof buf, "%s%.3g", r ? " " : "", result.relErr);
      errText += buf;
    }
    printf("call %d key %llu %s %s count %zu%s%s: wrong per rank [%s], relerr per rank [%s]%s\n",
           c.index, (unsigned long long)c.key, dtypeName(c.dtype), redOpName(c.op), c.count,
           c.choice.empty() ? "" : " ran ", c.choice.c_str(),
           wrongText.c_str(), errText.c_str(), wrongCall ? "  WRONG" : "");
    *wrongTotal += wrongCall;
  }
  return Status::Ok();
}

int run(int argc, char** argv) {
  std::string dir, algoName;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--algo") && i + 1 < argc) {
      algoName = argv[++i];
    } else if (argv[i][0] != '-' && dir.empty()) {
      dir = argv[i];
    } else {
      fprintf(stderr, "usage: gradcomp-refcheck [--algo NAME] DIR\n");
      return 2;
    }
  }
  if (dir.empty()) {
    fprintf(stderr, "usage: gradcomp-refcheck [--algo NAME] DIR\n");
    return 2;
  }
  Manifest m;
  Status s = parseManifest(dir, &m);
  if (s.ok() && !algoName.empty()) m.algo = algoName;
  const algo::AlgorithmInfo* info = s.ok() ? algo::findAlgorithm(m.algo) : nullptr;
  if (s.ok() && (info == nullptr || !info->reference))
    s = Status(Err::InvalidArgument, "algorithm '" + m.algo + "' " +
                                         (info ? "has no Reference" : "is not registered") +
                                         "; known: " + algo::algorithmNames());
  uint64_t wrong = 0;
  if (s.ok()) {
    printf("gradcomp-refcheck: %s, %d ranks, %zu calls from %s\n", m.algo.c_str(), m.nranks,
           m.calls.size(), dir.c_str());
    s = replay(dir, m, *info, &wrong);
  }
  if (!s.ok()) {
    fprintf(stderr, "gradcomp-refcheck: %s\n", s.message().c_str());
    return 2;
  }
  printf("gradcomp-refcheck: %s: %llu wrong elements over %zu calls x %d ranks\n",
         wrong ? "FAIL" : "PASS", (unsigned long long)wrong, m.calls.size(), m.nranks);
  return wrong ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    fprintf(stderr, "gradcomp-refcheck: %s\n", e.what());
  }
  return 2;
}
