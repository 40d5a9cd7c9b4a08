// Writes the seed corpus of every fuzz target (tests/fuzz/corpus/<target>/)
// with the real encoders, so each seed starts the fuzzer on a valid input:
//   build/tests/fuzz/gen_corpus tests/fuzz/corpus
// Each seed is the target's parameter bytes (fuzz_common.h Input layout,
// documented at the top of each fuzz_<target>.cc) followed by the payload.
#include <arpa/inet.h>
#include <sys/stat.h>

#include <cmath>
#include <fstream>

#include "algorithms/quant/chunk_codecs.h"
#include "algorithms/quant/fft_payload.h"
#include "algorithms/sparse/wire_format.h"
#include "plugin/net/net_common.h"
#include "tests/fuzz/fuzz_common.h"
#include "transport/bootstrap_wire.h"
#include "transport/monitor_wire.h"

using namespace gradcomp;
using Bytes = std::vector<uint8_t>;
using fuzz::putUint;

namespace {

std::string g_root;

void must(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "gen_corpus: %s: %s\n", what, s.message().c_str());
    std::exit(1);
  }
}

void write(const std::string& target, const std::string& name, const Bytes& bytes) {
  const std::string dir = g_root + "/" + target;
  mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/" + name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), long(bytes.size()));
}

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.37f * float(i) + 0.1f);
  return v;
}

void sparseWire(device::Backend& dev) {
  using namespace algo::sparse;
  auto seed = [&](const char* name, bool wide, uint64_t count, std::vector<uint64_t> offsets,
                  int messages) {
    const uint64_t base = 1000;
    ::Bytes out;
    putUint(&out, wide ? 1 : 0, 1);
    putUint(&out, count, 2);
    putUint(&out, 256, 2);  // capacity
    putUint(&out, base, 4);
    if (wide) count += uint64_t(1) << 32;
    Coo list(dev);
    list.resize(offsets.size());
    for (size_t i = 0; i < offsets.size(); ++i)
      list.idx.data()[i] = base + offsets[i], list.val.data()[i] = 0.5f + float(offsets[i]);
    algo::sparse::Bytes msg(dev);
    for (int m = 0; m < messages; ++m)
      must(encodeSparse(dev, SparsePiece{&list, 0, offsets.size(), base, count}, &msg), name);
    must(dev.sync(), name);
    write("sparse_wire", name, cat(out, ::Bytes(msg.data(), msg.data() + msg.size())));
  };
  seed("coo", false, 200, {3, 77, 150}, 1);
  std::vector<uint64_t> run;
  for (uint64_t o = 10; o < 40; ++o) run.push_back(o);
  run.push_back(60);
  seed("densestream", false, 200, run, 1);
  std::vector<uint64_t> all;
  for (uint64_t o = 0; o < 24; ++o) all.push_back(o);
  seed("dense", false, 24, all, 1);
  seed("two_messages", false, 100, {1, 2, 3, 50}, 2);
  seed("wide_offsets", true, 50, {5, 9}, 1);
  seed("empty", false, 30, {}, 1);
}

void denseStream(device::Backend& dev) {
  auto seed = [&](const char* name, int indexBytes, uint64_t n, std::vector<uint64_t> offsets) {
    const uint64_t base = 7;
    std::vector<uint64_t> idx;
    std::vector<float> val;
    for (uint64_t o : offsets) idx.push_back(base + o), val.push_back(-1.5f + float(o));
    size_t bytes = 0, blocks = 0;
    must(dev.denseStreamSize(idx.data(), idx.size(), indexBytes, &bytes, &blocks), name);
    Bytes body(bytes);
    must(dev.denseStreamEncode(idx.data(), val.data(), idx.size(), base, indexBytes, body.data(),
                               body.size()), name);
    must(dev.sync(), name);
    Bytes out;
    putUint(&out, indexBytes == 8, 1);
    putUint(&out, n, 2);
    putUint(&out, blocks, 2);
    putUint(&out, idx.size(), 2);  // nnz: the entries the body holds
    putUint(&out, base, 4);
    write("densestream", name, cat(out, body));
  };
  seed("runs4", 4, 100, {0, 1, 2, 4, 5, 20, 21, 99});
  seed("runs8", 8, 100, {3, 4, 5, 6, 7, 8, 9, 10, 11, 30});
  seed("single", 4, 1, {0});
}

void quantPayload(device::Backend& dev) {
  using namespace algo::quant;
  auto maxmin = [&](const char* name, int bits, size_t bucket, size_t count) {
    MaxMinCodec codec(bits, bucket);
    Bytes payload(codec.encodedBytes(count));
    const std::vector<float> src = ramp(count, 3.0f);
    must(codec.encode(dev, src.data(), count, 0, 42, payload.data(), nullptr), name);
    must(dev.sync(), name);
    Bytes out;
    putUint(&out, 0, 1);
    putUint(&out, bits == 1 ? 0 : bits == 2 ? 1 : bits == 4 ? 2 : 3, 1);
    putUint(&out, 0, 1);
    putUint(&out, bucket - 1, 2);
    putUint(&out, count, 2);
    putUint(&out, 1, 1);
    write("quant_payload", name, cat(out, payload));
  };
  maxmin("qsgd8", 8, 16, 50);
  maxmin("qsgd4", 4, 7, 33);
  maxmin("qsgd1", 1, 64, 130);
  auto rbf = [&](const char* name, int bits, int mantissa, size_t count) {
    RbfCodec codec(bits, mantissa, 0.0);
    Bytes payload(codec.encodedBytes(count));
    const std::vector<float> src = ramp(count, 0.25f);
    must(codec.encode(dev, src.data(), count, 0, 0, payload.data(), nullptr), name);
    must(dev.sync(), name);
    Bytes out;
    putUint(&out, 1, 1);
    putUint(&out, bits - 3, 1);
    putUint(&out, mantissa, 1);
    putUint(&out, 0, 2);
    putUint(&out, count, 2);
    putUint(&out, 0, 1);
    write("quant_payload", name, cat(out, payload));
  };
  rbf("rbf10", 10, 6, 40);
  rbf("rbf5", 5, 1, 17);
}

void signPayload(device::Backend& dev) {
  auto seed = [&](const char* name, size_t n, int inBits, int maxIn, int nranks) {
    Bytes counts(device::packedBytes(n, inBits)), votes(device::packedBytes(n, 1));
    for (size_t i = 0; i < n; ++i)  // count i % (maxIn + 1), as a partial count
      for (int b = 0; b < inBits; ++b)
        if (((i % size_t(maxIn + 1)) >> b) & 1) {
          const size_t bit = i * size_t(inBits) + size_t(b);
          counts[bit / 8] |= uint8_t(1u << (bit % 8));
        }
    const std::vector<float> src = ramp(n, 1.0f);
    must(dev.signPack(src.data(), n, votes.data()), name);
    Bytes out;
    putUint(&out, n, 2);
    putUint(&out, inBits - 1, 1);
    putUint(&out, maxIn, 1);
    putUint(&out, nranks - 1, 1);
    write("sign_payload", name, cat(cat(out, counts), votes));
  };
  seed("two_ranks", 21, 2, 1, 3);
  seed("eight_ranks", 64, 4, 7, 8);
  seed("odd", 5, 3, 4, 5);
}

void fftPayload(device::Backend& dev) {
  using namespace algo::quant;
  auto seed = [&](const char* name, size_t n, size_t chunk, double keep, int bits, int mantissa) {
    FftLayout l;
    l.n = n, l.chunk = chunk, l.keep = keep, l.bits = bits, l.mantissa = mantissa;
    Bytes payload(fftPayloadBytes(l));
    const std::vector<float> src = ramp(n, 1.0f);
    must(fftEncode(dev, l, src.data(), payload.data()), name);
    Bytes out;
    putUint(&out, n, 2);
    putUint(&out, chunk - 2, 2);
    putUint(&out, uint64_t(std::lround(keep * 255)), 1);
    putUint(&out, bits ? bits - 2 : 0, 1);
    putUint(&out, mantissa, 1);
    write("fft_payload", name, cat(out, payload));
  };
  // keep values that are exact in /255 steps, so the fuzzer's layout matches.
  seed("rbf10", 100, 32, 51 / 255.0, 10, 6);
  seed("raw", 70, 16, 102 / 255.0, 0, 0);
  seed("one_chunk", 9, 64, 255 / 255.0, 8, 4);
}

void bootstrapWire() {
  using namespace transport::wire;
  auto seed = [&](const char* name, bool table, int ranks, uint32_t seq, const std::string& msg) {
    Bytes out;
    putUint(&out, table, 1);
    putUint(&out, ranks - 1, 1);
    putUint(&out, seq, 1);
    write("bootstrap_wire", name, cat(out, Bytes(msg.begin(), msg.end())));
  };
  seed("hello", false, 4, 2, packHello(3, 4, 2, "ucx-address-of-rank-3"));
  seed("hello_empty", false, 1, 0, packHello(0, 1, 0, ""));
  seed("table", true, 3, 1, packTable(1, {"addr0", "", "address-2"}));
}

void monitorWire() {
  using namespace transport::monitor;
  auto seed = [&](const char* name, bool text, int rank, const std::string& bytes) {
    Bytes out;
    putUint(&out, text, 1);
    putUint(&out, rank, 1);
    write("monitor_wire", name, cat(out, Bytes(bytes.begin(), bytes.end())));
  };
  RankInfo root;
  root.enabled = true;
  root.pid = 4242;
  root.host = "node7";
  root.port = 29600;
  root.token = 0x1234abcd5678ull;
  root.addrs = {"10.0.0.1", "192.168.5.3"};
  seed("info_root", true, 0, packInfo(root));
  RankInfo off;
  off.pid = 17;
  off.host = "node8";
  seed("info_off", true, 3, packInfo(off));
  Message hello;
  hello.type = MsgType::Hello;
  hello.rank = 3;
  hello.token = root.token;
  Message suspect;
  suspect.type = MsgType::Suspect;
  suspect.rank = 2;
  suspect.kind = uint8_t(SuspectKind::Silent);
  suspect.token = 1;
  suspect.seconds = 20;
  suspect.text = "no progress from rank 2 for 20.0 s";
  Message verdict;
  verdict.type = MsgType::Verdict;
  verdict.rank = 2;
  verdict.kind = uint8_t(Err::RemoteError);
  verdict.text = "connection closed";
  seed("records", false, 0, encode(hello) + encode(suspect) + encode(verdict));
  seed("partial", false, 0, encode(verdict).substr(0, 9));
}

void configFile() {
  auto seed = [&](const char* name, const std::string& text) {
    write("config_file", name, Bytes(text.begin(), text.end()));
  };
  seed("top_level", "algo = \"dense\"\ncomms = \"size:8,name:dp*\"\nmin_bytes = \"1M\"\n");
  seed("params", "algo = \"topk\"\n[params]\nDENSITY = 0.01\n");
  seed("rules",
       "algo = \"qsgd\"\nmin_bytes = 4096\n[[rule]]\ncomms = \"size:16\"\nmin_bytes = \"64M\"\n"
       "max_bytes = \"1G\"\nalgo = \"off\"\n[[rule]]\nparams = { DENSITY = 0.001 }\n");
}

void netHandle() {
  Bytes h(NCCL_NET_HANDLE_MAXSIZE, 0);
  const uint32_t magic = 0x67634e31, tag = 5;  // plugin/net/ucx_net.cc kHandleMagic
  std::memcpy(h.data(), &magic, 4);
  std::memcpy(h.data() + 4, &tag, 4);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(41234);
  addr.sin_addr.s_addr = htonl(0x7f000001);
  std::memcpy(h.data() + 8, &addr, sizeof addr);
  write("net_handle", "loopback", h);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  mkdir(g_root.c_str(), 0755);
  device::Backend& dev = device::cpuBackend();
  sparseWire(dev);
  denseStream(dev);
  quantPayload(dev);
  signPayload(dev);
  fftPayload(dev);
  bootstrapWire();
  monitorWire();
  configFile();
  netHandle();
  return 0;
}
