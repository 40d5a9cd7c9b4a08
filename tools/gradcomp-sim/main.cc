// gradcomp-sim: runs the registered algorithms' real schedules for P simulated
// ranks (threads) over SimTransport's alpha-beta clock and reports, per
// algorithm and P: bytes sent per rank (max/mean), messages, and the predicted
// time per allreduce, next to the Ok-Topk Table 1 volume (formulas.h).
//
//   gradcomp-sim --algos oktopk,topka --ranks 8..4096 --count 1M --density 0.01
//                --gbps 1 --alpha-us 30 --json out.json  (one line)
//
// --ranks takes a list (4,8,16) or a doubling range (8..4096). The count per
// row is --count halved until P ranks fit --mem-budget (rankBytes: about eight
// fp32 buffers per rank, plus topka's gathered blocks), rounded down to a
// multiple of 1024; the JSON and table say which count each row used.
//
// --gpu-model DESIGNS prices the same schedules on a modeled GPU node
// (gpu_model.h, gpu_table.h): per-call time of each design at every P and
// every --gbps rate (a list), beside NCCL's ring (docs/results/gpu_model.md).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/log.h"
#include "tools/gradcomp-sim/auto_check.h"
#include "tools/gradcomp-sim/formulas.h"
#include "tools/gradcomp-sim/gpu_calibration.h"
#include "tools/gradcomp-sim/gpu_table.h"
#include "tools/gradcomp-sim/sim_run.h"

namespace gradcomp::sim {
namespace {

struct Flags {
  bool gpu = false;  // --gpu-model
  std::vector<size_t> autoCounts;  // --auto-check
  std::vector<std::string> algos;
  std::vector<int> ranks{4, 8, 16};
  uint64_t count = 1 << 20, memBudget = uint64_t(6) << 30;
  std::vector<double> gbps{10};
  double alphaUs = 0, computeScale = 0, hostNsPerByte = 0;
  // --ranks-per-host L: hosts of L consecutive ranks, intra-host links at
  // --intra-gbps / --intra-alpha-us; --hierarchy flat,host runs each schedule.
  int ranksPerHost = 0;
  double intraGbps = 1600, intraAlphaUs = 2;
  std::vector<std::string> hierarchies{"flat"};
  std::string jsonPath;
  std::string kbenchPath;  // --gpu-kbench
  SimJob job;  // algorithm parameters, iterations, inputs
};

const char* kUsage =
    "NAME\n"
    "  gradcomp-sim - gradcomp's algorithms over a simulated network, up to thousands of ranks\n"
    "\n"
    "SYNOPSIS\n"
    "  gradcomp-sim [--algos a,b|all] [--ranks 4,8|8..4096] [--count N[K|M]]\n"
    "  [--mem-budget BYTES] [--gbps RATE] [--alpha-us A] [--compute-scale S]\n"
    "  [--host-ns-per-byte O]\n"
    "  [--ranks-per-host L] [--intra-gbps RATE] [--intra-alpha-us A] [--hierarchy flat,host]\n"
    "  [--density D] [--param NAME=VALUE]... [--warmup W] [--iters N] [--seed S]\n"
    "  [--input gradient|uniform|integer|onehot|ones] [--stack BYTES] [--timeout-s T]\n"
    "  [--json PATH]\n"
    "  [--gpu-model staged,resident,persistent|all] [--gpu-hbm-gbs B] [--gpu-pcie-gbs B]\n"
    "  [--gpu-mapped-gbs B] [--gpu-host-gbs B] [--gpu-launch-us T] [--gpu-sync-us T]\n"
    "  [--gpu-flag-us T] [--gpu-step-us T] [--gpu-select-passes K] [--gpu-kbench FILE]\n"
    "  [--auto-check N,N...] [--coll allreduce|reducescatter|allgather]\n"
    "\n"
    "DESCRIPTION\n"
    "  Runs the real schedules of every rank as threads over a simulated transport and\n"
    "  prints, per algorithm and rank count, simulated time per call and wire bytes.\n"
    "\n"
    "OPTIONS\n"
    "Time model: alpha per message, 1/(gbps*1e9/8) s per byte, one send and one\n"
    "receive at a time per NIC; --compute-scale charges thread CPU time (0: free);\n"
    "--host-ns-per-byte charges the network stack's CPU per byte sent and received\n"
    "(times max(1, compute scale)).\n"
    "--ranks-per-host L: hosts of L consecutive ranks; messages inside a host use their\n"
    "own links (--intra-gbps, default 1600, --intra-alpha-us, default 2), --gbps is the\n"
    "link between hosts; rows add the bytes a rank sends to other hosts. --hierarchy\n"
    "flat,host runs each algorithm flat and/or hierarchically (dense inside hosts, the\n"
    "algorithm across hosts on 1/L shards; GRADCOMP_HIERARCHY).\n"
    "--gpu-model: one GPU per node (defaults H100 + PCIe Gen5): each rank's primitives\n"
    "are priced from the bytes their arguments span (HBM, PCIe DMA / mapped access,\n"
    "host loops) with a launch floor and the host syncs of each design: staged (v1:\n"
    "mapped buffers, a sync per primitive, host loops), resident (one stream, a sync\n"
    "per round), persistent (one kernel per call, flag waits); ms per call for every\n"
    "--ranks x --gbps (a list), beside NCCL's ring. --count is the count reported; a\n"
    "replay runs count/m elements (--mem-budget) and scales bytes by m. The compute\n"
    "scale then charges only the host code outside primitives.\n"
    "--gpu-kbench FILE: price each kernel at the launch floor and rate gradcomp-kbench\n"
    "measured (its -J JSON) instead of --gpu-hbm-gbs and --gpu-launch-us; kernels the\n"
    "file lacks keep the constants (the per-primitive table marks them).\n"
    "--auto-check N,N...: GRADCOMP_ALGO=auto's model offline: each candidate of\n"
    "GRADCOMP_AUTO_CANDIDATES (or --param AUTO_CANDIDATES=...) is simulated at the\n"
    "probe's sizes, the tuner's model code fits it, and its predictions at these\n"
    "element counts are printed beside each candidate's simulated time (use a\n"
    "--compute-scale > 0 so compute counts).\n"
    "--coll reducescatter: each algorithm's reduce-scatter form (NCCL's layout; the\n"
    "count, rounded down to a multiple of the ranks, is the whole input; --hierarchy\n"
    "host too: dense inside hosts on portions, the form across hosts on each rail;\n"
    "table_hi is the allreduce's bound, so 0 here).\n"
    "--coll allgather: the allgather schedules (default dense,cast,blockq; --param\n"
    "BITS=4, AG_BLOCK=N, AG_CAST=fp8), count the whole output (a multiple of the\n"
    "ranks); table_hi is the exact bytes a rank sends, (P-1) payload(count/P), or\n"
    "with --hierarchy host (H-1) payload(count/P) + (L-1) H (count/P) 4 (formulas.h).\n"
    "-h, --help: this help.\n"
    "\n"
    "EXIT STATUS\n"
    "  0 when every simulated run completed; 1 when one failed (a schedule error, a\n"
    "  simulated deadlock past --timeout-s); 2 for a usage error.\n"
    "\n"
    "SEE ALSO\n"
    "  gradcomp-bench(1); docs/usage.md, docs/results/performance.md\n";

// The GpuConstants field a --gpu-* flag sets; nullptr for other flags.
double* gpuConstant(const std::string& flag, GpuConstants* c) {
  if (flag == "--gpu-hbm-gbs") return &c->hbmGBs;
  if (flag == "--gpu-pcie-gbs") return &c->pcieGBs;
  if (flag == "--gpu-mapped-gbs") return &c->mappedGBs;
  if (flag == "--gpu-host-gbs") return &c->hostGBs;
  if (flag == "--gpu-launch-us") return &c->launchUs;
  if (flag == "--gpu-sync-us") return &c->syncUs;
  if (flag == "--gpu-flag-us") return &c->flagUs;
  if (flag == "--gpu-step-us") return &c->stepUs;
  if (flag == "--gpu-select-passes") return &c->selectPasses;
  return nullptr;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

Status parseRanks(const std::string& text, std::vector<int>* out) {
  out->clear();
  const size_t dots = text.find("..");
  if (dots != std::string::npos) {
    const int lo = std::atoi(text.substr(0, dots).c_str()), hi = std::atoi(text.c_str() + dots + 2);
    GC_REQUIRE(lo >= 1 && hi >= lo && hi <= (1 << 20), Err::InvalidArgument,
               "--ranks '%s': expected LO..HI with 1 <= LO <= HI <= 1048576", text.c_str());
    for (long p = lo; p <= hi; p *= 2) out->push_back(int(p));
    return Status::Ok();
  }
  for (const std::string& part : split(text, ',')) {
    const int p = std::atoi(part.c_str());
    GC_REQUIRE(p >= 1 && p <= (1 << 20), Err::InvalidArgument,
               "--ranks: '%s' is not a rank count in 1..1048576", part.c_str());
    out->push_back(p);
  }
  return Status::Ok();
}

Status parseDouble(const std::string& flag, const std::string& text, double lo, double* out) {
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  GC_REQUIRE(end && *end == 0 && !text.empty() && *out >= lo, Err::InvalidArgument,
             "%s '%s': expected a number >= %g", flag.c_str(), text.c_str(), lo);
  return Status::Ok();
}

Status parseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    GC_REQUIRE(i + 1 < argc, Err::InvalidArgument, "%s needs a value\n%s", flag.c_str(), kUsage);
    const std::string v = argv[++i];
    double d = 0;
    uint64_t u = 0;
    if (flag == "--algos") {
      f->algos = split(v, ',');  // checked below, against --coll's registry
    } else if (flag == "--ranks") {
      GC_CHECK(parseRanks(v, &f->ranks));
    } else if (flag == "--count") {
      GC_CHECK(param::parseSize(v, flag, &u));
      f->count = u;
    } else if (flag == "--mem-budget") {
      GC_CHECK(param::parseSize(v, flag, &f->memBudget));
    } else if (flag == "--stack") {
      GC_CHECK(param::parseSize(v, flag, &u));
      f->job.stackBytes = u;
    } else if (flag == "--gbps") {
      f->gbps.clear();
      for (const std::string& part : split(v, ',')) {
        GC_CHECK(parseDouble(flag, part, 1e-6, &d));
        f->gbps.push_back(d);
      }
    } else if (flag == "--gpu-kbench") {
      f->kbenchPath = v;
    } else if (flag == "--gpu-model") {
      f->gpu = true;
      GC_CHECK(parseGpuDesigns(v, &f->job.gpu.designs));
    } else if (gpuConstant(flag, &f->job.gpu.constants)) {
      // Bandwidths > 0, times >= 0, passes >= 1.
      const double lo = flag == "--gpu-select-passes" ? 1
                        : flag.size() > 4 && flag.compare(flag.size() - 4, 4, "-gbs") == 0 ? 1e-9
                                                                                            : 0;
      GC_CHECK(parseDouble(flag, v, lo, gpuConstant(flag, &f->job.gpu.constants)));
    } else if (flag == "--alpha-us") {
      GC_CHECK(parseDouble(flag, v, 0, &f->alphaUs));
    } else if (flag == "--compute-scale") {
      GC_CHECK(parseDouble(flag, v, 0, &f->computeScale));
    } else if (flag == "--host-ns-per-byte") {
      GC_CHECK(parseDouble(flag, v, 0, &f->hostNsPerByte));
    } else if (flag == "--ranks-per-host") {
      GC_CHECK(parseDouble(flag, v, 1, &d));
      f->ranksPerHost = int(d);
    } else if (flag == "--intra-gbps") {
      GC_CHECK(parseDouble(flag, v, 1e-6, &f->intraGbps));
    } else if (flag == "--intra-alpha-us") {
      GC_CHECK(parseDouble(flag, v, 0, &f->intraAlphaUs));
    } else if (flag == "--hierarchy") {
      f->hierarchies = split(v, ',');
      for (const std::string& h : f->hierarchies)
        GC_REQUIRE(h == "flat" || h == "host", Err::InvalidArgument,
                   "--hierarchy: '%s' is not flat or host", h.c_str());
    } else if (flag == "--timeout-s") {
      GC_CHECK(parseDouble(flag, v, 0.1, &f->job.timeoutS));
    } else if (flag == "--density") {
      GC_CHECK(f->job.config.set("DENSITY", v, flag));
    } else if (flag == "--param") {
      const size_t eq = v.find('=');
      GC_REQUIRE(eq != std::string::npos, Err::InvalidArgument,
                 "--param '%s': expected NAME=VALUE (a GRADCOMP_ parameter without prefix)",
                 v.c_str());
      GC_CHECK(f->job.config.set(v.substr(0, eq), v.substr(eq + 1), "--param"));
    } else if (flag == "--warmup" || flag == "--iters") {
      GC_CHECK(parseDouble(flag, v, flag == "--iters" ? 1 : 0, &d));
      (flag == "--iters" ? f->job.iters : f->job.warmup) = int(d);
    } else if (flag == "--seed") {
      GC_CHECK(parseDouble(flag, v, 0, &d));
      f->job.seed = uint64_t(d);
    } else if (flag == "--input") {
      GC_CHECK(bench::parseInput(v, flag, &f->job.input));
    } else if (flag == "--auto-check") {
      for (const std::string& part : split(v, ',')) {
        GC_CHECK(param::parseSize(part, flag, &u));
        GC_REQUIRE(u >= 1, Err::InvalidArgument, "--auto-check: counts must be >= 1");
        f->autoCounts.push_back(size_t(u));
      }
    } else if (flag == "--json") {
      f->jsonPath = v;
    } else if (flag == "--coll") {
      GC_REQUIRE(v == "allreduce" || v == "reducescatter" || v == "allgather",
                 Err::InvalidArgument, "--coll '%s': expected allreduce, reducescatter or "
                 "allgather", v.c_str());
      f->job.coll = v == "reducescatter" ? algo::Collective::ReduceScatter
                    : v == "allgather"   ? algo::Collective::AllGather
                                         : algo::Collective::AllReduce;
    } else {
      return makeStatus(Err::InvalidArgument, "unknown flag '%s'\n%s", flag.c_str(), kUsage);
    }
  }
  const bool ag = f->job.coll == algo::Collective::AllGather;
  if (f->algos.empty())
    f->algos = ag ? std::vector<std::string>{"dense", "cast", "blockq"}
                  : std::vector<std::string>{"dense", "topka", "oktopk"};
  if (f->algos == std::vector<std::string>{"all"}) {
    f->algos.clear();
    for (const algo::AlgorithmInfo* a :
         ag ? algo::listAllgatherAlgorithms() : algo::listAlgorithms())
      f->algos.push_back(a->name);
  }
  for (const std::string& a : f->algos)
    GC_REQUIRE(ag ? algo::findAllgatherAlgorithm(a) : algo::findAlgorithm(a),
               Err::InvalidArgument, "--algos: unknown %salgorithm '%s': expected one of %s",
               ag ? "allgather " : "", a.c_str(),
               (ag ? algo::allgatherNames() : algo::algorithmNames()).c_str());
  GC_REQUIRE(!ag || (!f->gpu && f->autoCounts.empty()), Err::InvalidArgument,
             "--coll allgather: not with --gpu-model or --auto-check (allreduce models)");
  GC_REQUIRE(f->ranksPerHost > 0 || f->hierarchies == std::vector<std::string>{"flat"},
             Err::InvalidArgument, "--hierarchy host needs --ranks-per-host");
  GC_REQUIRE(f->gpu || f->gbps.size() == 1, Err::InvalidArgument,
             "--gbps: a list of rates needs --gpu-model");
  if (f->job.coll == algo::Collective::ReduceScatter) {
    for (const std::string& a : f->algos)
      GC_REQUIRE(algo::findAlgorithm(a)->hasReduceScatter(), Err::InvalidArgument,
                 "--coll reducescatter: %s has no reduce-scatter form", a.c_str());
  }
  GC_REQUIRE(f->gpu || f->kbenchPath.empty(), Err::InvalidArgument,
             "--gpu-kbench needs --gpu-model");
  if (!f->kbenchPath.empty())
    GC_CHECK(GpuCalibration::fromFile(f->kbenchPath, f->job.gpu.constants.selectPasses,
                                      &f->job.gpu.calibration));
  return Status::Ok();
}

struct Row {
  std::string algo;
  int P;
  size_t count, k;
  SimResult r;
  VolumeBound table;
  std::string sched = "flat";  // --hierarchy
};

// Bytes one rank holds for `count` elements: about eight fp32 buffers, plus
// for the allgather-based top-k (topka) every rank's COO block twice.
double rankBytes(const std::string& algo, int P, double count, double density) {
  double b = 32 * count;
  if (algo == "topka") b += 2 * double(P) * (8 * density * count + 48);
  return b;
}

size_t countFor(const Flags& f, const std::string& algo, int P, double density) {
  uint64_t c = f.count;
  while (c > 1024 && double(P) * rankBytes(algo, P, double(c), density) > double(f.memBudget))
    c /= 2;
  return c >= 1024 ? size_t(c / 1024 * 1024) : size_t(c);
}

void printRow(const Row& w, bool hosts) {
  const double hi = w.table.known ? w.table.hi + w.table.framing : 0;
  std::printf("%-8s %5d %9zu %7zu %11.3f %13.0f %13.0f %13.0f %9.0f %13.0f %7.2f %8.1f",
              w.algo.c_str(), w.P, w.count, w.k, w.r.timeS * 1e3, w.r.sentMax, w.r.sentMean,
              w.r.recvMax, w.r.msgsMax, hi, hi > 0 ? w.r.sentMax / hi : 0.0, w.r.wallS);
  if (hosts) std::printf(" %5s %13.0f %13.0f", w.sched.c_str(), w.r.interHostMax, w.r.interHostMean);
  std::printf("\n");
  std::fflush(stdout);
}

void writeJson(const Flags& f, const std::vector<Row>& rows) {
  FILE* out = std::fopen(f.jsonPath.c_str(), "w");
  if (!out) {
    GC_WARN("cannot write --json %s", f.jsonPath.c_str());
    return;
  }
  std::fprintf(out, "{\"tool\": \"gradcomp-sim\", \"gbps\": %g, \"alpha_us\": %g, "
               "\"compute_scale\": %g, \"host_ns_per_byte\": %g, \"warmup\": %d, \"iters\": %d, "
               "\"seed\": %llu,\n \"rows\": [\n",
               f.gbps[0], f.alphaUs, f.computeScale, f.hostNsPerByte, f.job.warmup, f.job.iters,
               (unsigned long long)f.job.seed);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& w = rows[i];
    std::fprintf(out, "  {\"algo\": \"%s\", \"P\": %d, \"count\": %zu, \"k\": %zu, "
                 "\"time_s\": %.9g, \"sent_max\": %.0f, \"sent_mean\": %.1f, \"recv_max\": %.0f, "
                 "\"msgs_max\": %.0f, \"msgs_mean\": %.1f, \"table_lo\": %.0f, \"table_hi\": %.0f, "
                 "\"framing\": %.0f, \"formula\": \"%s\", \"wall_s\": %.2f, "
                 "\"ranks_per_host\": %d, \"hierarchy\": \"%s\", \"inter_host_max\": %.0f, "
                 "\"inter_host_mean\": %.1f}%s\n",
                 w.algo.c_str(), w.P, w.count, w.k, w.r.timeS, w.r.sentMax, w.r.sentMean,
                 w.r.recvMax, w.r.msgsMax, w.r.msgsMean, w.table.lo, w.table.hi, w.table.framing,
                 w.table.formula.c_str(), w.r.wallS, f.ranksPerHost, w.sched.c_str(),
                 w.r.interHostMax, w.r.interHostMean, i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(out, " ]}\n");
  std::fclose(out);
}

int run(int argc, char** argv) {
  Flags f;
  Status s = parseFlags(argc, argv, &f);
  if (!s.ok()) {
    std::fprintf(stderr, "gradcomp-sim: %s\n", s.message().c_str());
    return 2;
  }
  double density = 0.01;
  (void)f.job.config.getDouble(param::Id::DENSITY, &density);
  f.job.model.alphaS = f.alphaUs * 1e-6;
  f.job.model.betaSPerByte = 8.0 / (f.gbps[0] * 1e9);
  f.job.model.computeScale = f.computeScale;
  f.job.model.hostSPerByte = f.hostNsPerByte * 1e-9;
  f.job.model.intraAlphaS = f.intraAlphaUs * 1e-6;
  f.job.model.intraBetaSPerByte = 8.0 / (f.intraGbps * 1e9);
  f.job.ranksPerHost = f.ranksPerHost;
  const bool hosts = f.ranksPerHost > 0;
  if (!f.autoCounts.empty()) return runAutoCheck(f.job, f.ranks, f.autoCounts, f.jsonPath);
  if (f.gpu) {
    GpuTableSpec spec;
    spec.algos = f.algos;
    spec.ranks = f.ranks;
    spec.count = f.count;
    spec.memBudget = f.memBudget;
    spec.base = f.job;
    spec.base.gpu.gbps = f.gbps;
    spec.jsonPath = f.jsonPath;
    return runGpuTable(spec);
  }
  std::printf("# gradcomp-sim: %.3g Gbit/s, alpha %.3g us, compute scale %g, %d warm-up + %d "
              "timed calls, seed %llu\n", f.gbps[0], f.alphaUs, f.computeScale, f.job.warmup,
              f.job.iters, (unsigned long long)f.job.seed);
  std::printf("%-8s %5s %9s %7s %11s %13s %13s %13s %9s %13s %7s %8s", "algo", "P", "count",
              "k", "time_ms", "sent_max", "sent_mean", "recv_max", "msgs_max", "table_hi+fr",
              "ratio", "wall_s");
  std::printf(hosts ? " %5s %13s %13s\n" : "\n", "sched", "inter_max", "inter_mean");
  if (hosts)
    std::printf("# %d ranks per host, %.3g Gbit/s and alpha %.3g us inside a host; "
                "inter_max/mean: bytes a rank sent to other hosts\n",
                f.ranksPerHost, f.intraGbps, f.intraAlphaUs);
  std::vector<Row> rows;
  int failures = 0;
  for (const std::string& a : f.algos)
    for (int P : f.ranks)
    for (const std::string& sched : f.hierarchies) {
      const bool rs = f.job.coll == algo::Collective::ReduceScatter;
      const bool ag = f.job.coll == algo::Collective::AllGather;
      Row w{a, P, countFor(f, a, P, density), 0, {}, {}, sched};
      if (rs || ag) w.count -= w.count % size_t(P);
      w.k = std::max<size_t>(1, size_t(std::floor(density * double(w.count))));
      if (ag) {
        s = allgatherVolume(a, f.job.config, P, w.count, f.ranksPerHost, sched == "host",
                            &w.table);
        if (!s.ok()) {
          std::fprintf(stderr, "gradcomp-sim: %s at P=%d: %s\n", a.c_str(), P,
                       s.toString().c_str());
          ++failures;
          continue;
        }
      } else if (!rs) {
        w.table = tableVolume(a, P, w.count, w.k);
      }
      SimJob job = f.job;
      job.algo = a;
      job.ranks = P;
      job.count = w.count;
      job.hierarchical = sched == "host";
      s = runSim(job, &w.r);
      if (!s.ok()) {
        std::fprintf(stderr, "gradcomp-sim: %s at P=%d: %s\n", a.c_str(), P,
                     s.toString().c_str());
        ++failures;
        continue;
      }
      printRow(w, hosts);
      rows.push_back(w);
      if (!f.jsonPath.empty()) writeJson(f, rows);  // partial results survive a later failure
    }
  return failures ? 1 : 0;
}

}  // namespace
}  // namespace gradcomp::sim

int main(int argc, char** argv) { return gradcomp::sim::run(argc, argv); }
