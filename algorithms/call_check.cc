#include "algorithms/call_check.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/param.h"
#include "transport/failure_monitor.h"

namespace gradcomp::algo {
namespace {

// Wire layout (host byte order, like the monitor's: one build, one kind of host):
//   u32 magic | u16 version | u16 collective (0 allreduce, 1 reduce-scatter) | u64 callSeq | u64 count | i32 dtype | i32 op |
//   u64 paramsHash | char algorithm[24] (NUL-padded)
constexpr uint32_t kMagic = 0x47435347;  // "GCSG"
constexpr uint16_t kVersion = 1;
constexpr size_t kAlgoBytes = 24;
constexpr double kExplainS = 0.2;  // how long a failed call waits for signatures to explain it

uint64_t fnv(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

bool checkEnabled() {
  static const bool on = [] {
    bool v = true;
    (void)param::getBool(param::Id::CALL_CHECK, &v);
    return v;
  }();
  return on;
}

const char* dtypeText(int t) {
  switch (DataType(t)) {
    case DataType::Int32: case DataType::Int64: case DataType::Float16: case DataType::Float32:
    case DataType::Float64: case DataType::BFloat16: return dtypeName(DataType(t));
  }
  return nullptr;
}

std::string hex(uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "%#llx", (unsigned long long)v);
  return b;
}

}  // namespace

CallSignature callSignature(const AlgorithmInfo& info, const param::Overrides& config,
                            uint64_t callSeq, const AllreduceArgs& args) {
  CallSignature sig;
  sig.callSeq = callSeq;
  sig.count = args.count;
  sig.dtype = args.dtype;
  sig.op = args.op;
  sig.coll = args.coll;
  sig.algorithm = info.name;
  // Effective values, not their spelling: "0.01" and "1e-2" hash alike.
  uint64_t h = 0xcbf29ce484222325ull;
  for (param::Id id : info.params) {
    param::Value v;
    if (!config.get(id, &v).ok()) continue;
    const param::Spec& spec = param::spec(id);
    h = fnv(h, spec.name, strlen(spec.name) + 1);
    h = fnv(h, &v.set, sizeof v.set);
    if (spec.kind == param::Kind::Double) h = fnv(h, &v.d, sizeof v.d);
    else if (spec.kind == param::Kind::Enum || spec.kind == param::Kind::String)
      h = fnv(h, v.s.data(), v.s.size() + 1);
    else h = fnv(h, &v.i, sizeof v.i);
  }
  sig.paramsHash = h;
  return sig;
}

void encodeSignature(const CallSignature& sig, unsigned char out[kSignatureBytes]) {
  memset(out, 0, kSignatureBytes);
  const int32_t dtype = int32_t(sig.dtype), op = int32_t(sig.op);
  memcpy(out, &kMagic, 4);
  memcpy(out + 4, &kVersion, 2);
  const uint16_t coll = uint16_t(sig.coll);
  memcpy(out + 6, &coll, 2);
  memcpy(out + 8, &sig.callSeq, 8);
  memcpy(out + 16, &sig.count, 8);
  memcpy(out + 24, &dtype, 4);
  memcpy(out + 28, &op, 4);
  memcpy(out + 32, &sig.paramsHash, 8);
  memcpy(out + 40, sig.algorithm.data(), std::min(sig.algorithm.size(), kAlgoBytes - 1));
}

Status compareSignature(const CallSignature& mine, int myRank, const unsigned char* wire,
                        size_t bytes, int peer) {
  uint32_t magic = 0;
  uint16_t version = 0;
  if (bytes >= 6) memcpy(&magic, wire, 4), memcpy(&version, wire + 4, 2);
  GC_REQUIRE(bytes == kSignatureBytes && magic == kMagic && version == kVersion && wire[63] == 0,
             Err::RemoteError,
             "call signature from rank %d is malformed: %zu bytes, magic %#x version %u (expected "
             "%zu bytes, magic %#x version %u)",
             peer, bytes, magic, unsigned(version), kSignatureBytes, kMagic, unsigned(kVersion));
  CallSignature theirs;
  int32_t dtype = 0, op = 0;
  uint16_t coll = 0;
  memcpy(&coll, wire + 6, 2);
  memcpy(&theirs.callSeq, wire + 8, 8);
  memcpy(&theirs.count, wire + 16, 8);
  memcpy(&dtype, wire + 24, 4);
  memcpy(&op, wire + 28, 4);
  memcpy(&theirs.paramsHash, wire + 32, 8);
  theirs.algorithm = reinterpret_cast<const char*>(wire + 40);
  std::string mineAlgo = mine.algorithm.substr(0, kAlgoBytes - 1);
  const bool kind = coll != uint16_t(mine.coll);
  const bool seq = kind || theirs.callSeq != mine.callSeq, count = theirs.count != mine.count,
             dt = dtype != int32_t(mine.dtype), rop = op != int32_t(mine.op),
             algo = theirs.algorithm != mineAlgo,
             params = !algo && theirs.paramsHash != mine.paramsHash;
  if (!seq && !count && !dt && !rop && !algo && !params) return Status::Ok();

  const char* dtName = dtypeText(dtype);
  const std::string theirDtype = dtName ? dtName : "dtype " + std::to_string(dtype);
  const std::string theirOp = op == int32_t(RedOp::Sum)   ? "sum"
                              : op == int32_t(RedOp::Avg) ? "avg"
                                                          : "op " + std::to_string(op);
  const char* theirColl = coll == 0 ? "allreduce" : coll == 1 ? "reducescatter" : "collective ?";
  const std::string mineColl = collectiveName(mine.coll);
  std::string text = "rank " + std::to_string(peer) + " called " + theirColl + " #" +
                     std::to_string(theirs.callSeq) + " with count " +
                     std::to_string(theirs.count) + " " + theirDtype + " " + theirOp;
  if (algo || params) text += " algorithm " + theirs.algorithm;
  if (params) text += " parameters " + hex(theirs.paramsHash);
  std::string own;
  auto add = [&](const std::string& part) { own += (own.empty() ? "" : " ") + part; };
  if (count) add("count " + std::to_string(mine.count));
  if (dt) add(dtypeName(mine.dtype));
  if (rop) add(redOpName(mine.op));
  if (algo) add("algorithm " + mineAlgo);
  if (params) add("parameters " + hex(mine.paramsHash));
  text += ", rank " + std::to_string(myRank) +
          (seq ? " called " + mineColl + " #" + std::to_string(mine.callSeq) + (own.empty() ? "" : " with ")
               : " with ") +
          own;
  if (params)
    text += " (the algorithm's parameters differ: set GRADCOMP_* and gcAlgoConfigSet alike on "
            "every rank)";
  return Status(Err::RemoteError, text);
}

Status runCheckedAllreduce(Algorithm& alg, Context& ctx, const AllreduceArgs& args,
                           const CallSignature& sig) {
  transport::Transport& net = ctx.net;
  const int P = net.size(), me = net.rank();
  const std::shared_ptr<transport::FailureMonitor> monitor = net.failureMonitor();
  const bool check = P > 1 && checkEnabled();

  // Receives before sends; to every peer, or around the ring beyond kSignatureAllToAllMax.
  std::vector<int> from, to;
  if (check && P <= kSignatureAllToAllMax) {
    for (int p = 0; p < P; ++p)
      if (p != me) from.push_back(p), to.push_back(p);
  } else if (check) {
    from = {(me + P - 1) % P};
    to = {(me + 1) % P};
  }
  unsigned char mine[kSignatureBytes];
  encodeSignature(sig, mine);
  std::vector<std::array<unsigned char, kSignatureBytes>> inbox(from.size());
  std::vector<transport::Handle> recvs, sends;
  Status s;
  for (size_t i = 0; s.ok() && i < from.size(); ++i) {
    transport::Handle h = 0;
    s = net.irecv(from[i], transport::kSignatureTag, inbox[i].data(), kSignatureBytes, &h);
    if (s.ok()) recvs.push_back(h);
  }
  for (size_t i = 0; s.ok() && i < to.size(); ++i) {
    transport::Handle h = 0;
    s = net.isend(to[i], transport::kSignatureTag, mine, kSignatureBytes, &h);
    if (s.ok()) sends.push_back(h);
  }
  if (s.ok()) s = runCollective(alg, ctx, args);
  // Failed after a verdict: nothing to explain (s is the verdict, or a
  // symptom found at the same time; the verdict wins below).
  const bool agreed = !s.ok() && monitor && monitor->failed();

  std::vector<size_t> got(recvs.size(), 0);
  std::vector<bool> arrived(recvs.size(), false);
  if (s.ok() && recvs.size() == from.size()) {
    // Every peer entered the call before this rank could finish it: no real wait.
    std::vector<transport::Handle> all = recvs;
    all.insert(all.end(), sends.begin(), sends.end());
    std::vector<size_t> bytes(all.size(), 0);
    s = net.waitAll(all.data(), all.size(), bytes.data());
    if (s.ok()) arrived.assign(recvs.size(), true), std::copy_n(bytes.begin(), got.size(), got.begin());
    recvs.clear(), sends.clear();
  } else if (!agreed) {
    // Explain the failure with what the peers said they were doing.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kExplainS);
    size_t left = recvs.size();
    while (left > 0 && std::chrono::steady_clock::now() < deadline && !(monitor && monitor->failed())) {
      for (size_t i = 0; i < recvs.size(); ++i) {
        if (arrived[i] || recvs[i] == 0) continue;
        bool done = false;
        if (!net.test(recvs[i], &done, &got[i]).ok()) recvs[i] = 0, --left;  // released
        else if (done) arrived[i] = true, recvs[i] = 0, --left;
      }
      if (left > 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  for (transport::Handle h : recvs)
    if (h) net.cancel(h);
  for (transport::Handle h : sends) net.cancel(h);

  if (!agreed) {
    for (size_t i = 0; i < arrived.size(); ++i) {
      if (!arrived[i]) continue;
      Status c = compareSignature(sig, me, inbox[i].data(), got[i], from[i]);
      if (!c.ok()) {
        const std::string symptom = s.ok() ? "" : " (this rank's own error: " + s.toString() + ")";
        GC_INFO(ALGO, "%s%s", c.message().c_str(), symptom.c_str());
        s = c;
        break;
      }
    }
  }
  // A verdict wins: over this rank's own error when both came at once, and
  // over a part of the call that completed here (a peer failed it). s is
  // kept when it is the verdict with what this rank was doing.
  if (monitor && monitor->failed()) {
    const Status v = monitor->verdict();
    return !s.ok() && s.message().rfind(v.message(), 0) == 0 ? s : v;
  }
  if (s.ok() || !monitor) return s;
  return monitor->agreeOnOwnFailure(s);
}

}  // namespace gradcomp::algo
