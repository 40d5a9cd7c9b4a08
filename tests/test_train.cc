// gradcomp-train end to end: the executable on real ranks (--ranks 2) over a
// subset of Fashion-MNIST, checked through its -J output; and its handling of
// bad flags and a missing dataset.
#include <catch2/catch.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

// <build>/tools/gradcomp-train/gradcomp-train, found from GC_TEST_BINARY_DIR
// or, failing that, from this test's own path (<build>/tests/test_train).
std::string trainBinary() {
  if (const char* dir = std::getenv("GC_TEST_BINARY_DIR"))
    return std::string(dir) + "/tools/gradcomp-train/gradcomp-train";
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  REQUIRE(n > 0);
  std::string build(self, static_cast<size_t>(n));
  build = build.substr(0, build.rfind('/'));  // <build>/tests
  build = build.substr(0, build.rfind('/'));  // <build>
  return build + "/tools/gradcomp-train/gradcomp-train";
}

struct Result {
  int exitCode = -1;
  std::string output;  // stdout and stderr together
};

// Runs gradcomp-train with `args` under timeout(1), so a hang fails the test.
// CTest's GC_TEST_SOURCE_DIR/BINARY_DIR are not registry parameters (the tool
// would warn about them), so the child does not inherit them.
Result runTrain(const std::string& args, int timeoutS = 120) {
  const std::string cmd = "env -u GC_TEST_SOURCE_DIR -u GC_TEST_BINARY_DIR timeout -k 5 " +
                          std::to_string(timeoutS) + " " + trainBinary() + " " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// The -J file: one object per line with the documented fields.
std::vector<std::map<std::string, double>> readEpochs(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  std::vector<std::map<std::string, double>> epochs;
  const std::regex field("\"([a-z_]+)\": ([-+0-9.eE]+)");
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("{") == std::string::npos) continue;
    std::map<std::string, double> e;
    for (std::sregex_iterator it(line.begin(), line.end(), field), end; it != end; ++it)
      e[(*it)[1]] = std::stod((*it)[2]);
    for (const char* key : {"epoch", "train_loss", "test_acc", "wall_s", "comm_s", "wire_bytes"})
      REQUIRE(e.count(key) == 1);
    epochs.push_back(e);
  }
  return epochs;
}

std::string tempJson(const char* tag) {
  return "/tmp/gc_train_" + std::string(tag) + "_" + std::to_string(getpid()) + ".json";
}

}  // namespace

TEST_CASE("gradcomp-train: 2 ranks on a subset learn (dense, gradient allreduce)", "[train][mp]") {
  // 4000 images / 2 ranks / batch 32 = 62 steps per epoch, 248 steps in all,
  // with 0.5 MiB buckets so the MLP's gradients travel in several buckets.
  const std::string json = tempJson("dense");
  const Result r = runTrain("--ranks 2 --algo dense --train-limit 4000 --test-limit 2000 "
                            "--epochs 4 --bucket-mb 0.5 -J " + json);
  INFO(r.output);
  REQUIRE(r.exitCode == 0);
  const auto epochs = readEpochs(json);
  std::remove(json.c_str());
  REQUIRE(epochs.size() == 4);
  for (size_t i = 0; i < epochs.size(); ++i) {
    CHECK(epochs[i].at("epoch") == i + 1);
    CHECK(epochs[i].at("wall_s") > 0);
    CHECK(epochs[i].at("comm_s") >= 0);
    CHECK(epochs[i].at("comm_s") <= epochs[i].at("wall_s"));
    // Dense ring/recursive doubling sends at least n(P-1)/P floats per call:
    // 62 steps x 535,818 floats x 4 bytes / 2.
    CHECK(epochs[i].at("wire_bytes") >= 62.0 * 535818 * 4 / 2);
  }
  CHECK(epochs.back().at("train_loss") < 0.75 * epochs.front().at("train_loss"));
  CHECK(epochs.back().at("test_acc") > 0.60);  // chance is 0.10
  CHECK(r.output.find("test_acc") != std::string::npos);  // rank 0's table
}

TEST_CASE("gradcomp-train: auto on the MLP with seed 1 reaches dense's accuracy band",
          "[train][mp]") {
  // auto's trials compress some early buckets (error feedback, flushed when
  // it returns to dense); the run must end where dense ends. On this subset
  // dense reaches about 80% after 4 epochs, but one epoch's test accuracy
  // moves by 1-3 points from the next (auto seed 1, 16 runs on 2026-11-28:
  // last epoch 0.775..0.821 against dense's 0.7975; a CI run ended 3.1
  // points under dense). The mean of the last two epochs moved at most 2.2
  // points from dense's in those runs, idle or under load: the band is +-3
  // points on it.
  std::map<std::string, std::vector<std::map<std::string, double>>> runs;
  for (const char* algo : {"dense", "auto"}) {
    const std::string json = tempJson(algo);
    // auto: calibrate whatever the machine's load (else it may run dense throughout).
    const std::string extra =
        std::string(algo) == "auto" ? "--param AUTO_PROBE_LIMIT_MS=60000 " : "";
    const Result r = runTrain(std::string("--ranks 2 --algo ") + algo +
                              " --model mlp --seed 1 --train-limit 4000 --test-limit 2000 "
                              "--epochs 4 --bucket-mb 0.5 " + extra + "-J " + json);
    INFO(algo << ": " << r.output);
    REQUIRE(r.exitCode == 0);
    runs[algo] = readEpochs(json);
    std::remove(json.c_str());
    REQUIRE(runs[algo].size() == 4);
  }
  const auto lastTwo = [](const std::vector<std::map<std::string, double>>& epochs) {
    return (epochs[epochs.size() - 2].at("test_acc") + epochs.back().at("test_acc")) / 2;
  };
  const double dense = lastTwo(runs["dense"]);
  const double chosen = lastTwo(runs["auto"]);
  INFO("test_acc, mean of the last two epochs: dense " << dense << ", auto " << chosen);
  CHECK(dense > 0.60);
  CHECK(std::fabs(chosen - dense) <= 0.03);
  // Which candidates auto runs depends on measured times (machine load), and
  // a compressed epoch ends with a higher training loss than dense's (1.18x
  // seen in a CI run, accuracy in the band): only a run that stopped
  // learning exceeds this.
  CHECK(runs["auto"].back().at("train_loss") < 1.3 * runs["dense"].back().at("train_loss"));
}

TEST_CASE("gradcomp-train: model averaging and stragglers", "[train][mp]") {
  // 2000 images / 2 ranks / batch 32 = 31 steps per epoch. Every step one of
  // the two ranks (the same choice on both) sleeps 20 ms before communicating.
  const std::string gradsJson = tempJson("straggle"), avgJson = tempJson("avg");
  const std::string common = "--ranks 2 --straggle 1:20 --train-limit 2000 --test-limit 2000 ";

  // Gradient allreduce every step: every step lasts at least the 20 ms sleep
  // (31 x 20 ms = 0.62 s; without stragglers this epoch takes ~0.3 s), and the
  // punctual rank waits that sleep out inside the allreduce, adding about
  // 31 x 20 / 2 = 0.31 s to the mean comm time.
  Result r = runTrain(common + "--epochs 1 -J " + gradsJson);
  INFO(r.output);
  REQUIRE(r.exitCode == 0);
  const auto grads = readEpochs(gradsJson);
  std::remove(gradsJson.c_str());
  REQUIRE(grads.size() == 1);
  CHECK(grads[0].at("wall_s") > 31 * 0.020);
  CHECK(grads[0].at("comm_s") > 0.25);

  // Weights averaged every 2 steps: 15 averages per epoch instead of 31 calls,
  // and each 2-step window lasts at least as long as one 20 ms sleep.
  r = runTrain(common + "--epochs 2 --average weights --period 2 -J " + avgJson);
  INFO(r.output);
  REQUIRE(r.exitCode == 0);
  const auto avg = readEpochs(avgJson);
  std::remove(avgJson.c_str());
  REQUIRE(avg.size() == 2);
  CHECK(avg[0].at("wire_bytes") > 0.4 * grads[0].at("wire_bytes"));
  CHECK(avg[0].at("wire_bytes") < 0.6 * grads[0].at("wire_bytes"));
  CHECK(avg[0].at("wall_s") > 15 * 0.020);
  CHECK(avg.back().at("train_loss") < avg.front().at("train_loss"));
  CHECK(avg.back().at("test_acc") > 0.55);  // chance is 0.10
}

TEST_CASE("gradcomp-train: the same --seed repeats a run exactly", "[train][mp]") {
  // Same initial weights, shuffles and straggler draws, and dense allreduce
  // sums in a fixed order: loss and accuracy must match to the printed digit.
  std::vector<std::map<std::string, double>> runs[2];
  for (auto& run : runs) {
    const std::string json = tempJson("seed");
    const Result r = runTrain("--ranks 2 --seed 7 --train-limit 1000 --test-limit 1000 "
                              "--epochs 1 --straggle 1:1 -J " + json);
    INFO(r.output);
    REQUIRE(r.exitCode == 0);
    run = readEpochs(json);
    std::remove(json.c_str());
    REQUIRE(run.size() == 1);
  }
  CHECK(runs[0][0].at("train_loss") == runs[1][0].at("train_loss"));
  CHECK(runs[0][0].at("test_acc") == runs[1][0].at("test_acc"));
  CHECK(runs[0][0].at("wire_bytes") == runs[1][0].at("wire_bytes"));
}

TEST_CASE("gradcomp-train: bad flags exit 2 naming the flag", "[train]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--epochs 0", "--epochs"},
      {"--batch abc", "--batch"},
      {"--lr -1", "--lr"},
      {"--model resnet", "--model"},
      {"--average both", "--average"},
      {"--period 4", "--average weights"},
      {"--straggle 3", "N:MS"},
      {"--algo nosuch", "dense"},
      {"--no-such-flag 1", "--no-such-flag"},
      {"--density 0.01", "--density"},  // dense has no density parameter
      {"--algo topka --density 7", "--density"},
      {"--param NOPE=1", "NOPE"},
      {"--epochs", "needs a value"},
      {"stray", "stray"},
      {"--sharded --algo wagma", "no reduce-scatter form"},
      {"--sharded --average weights", "--average grads"},
      {"--sharded --momentum 0 --momentum-correction on", "--momentum-correction"},
      {"--ag-algo blockq", "--sharded"},
      {"--sharded --ag-algo nosuch", "blockq"},
      {"--sharded --ag-algo blockq --ag-bits x", "--ag-bits"},
      {"--sharded --ag-algo blockq --ag-cast fp8", "--ag-cast"},  // cast's, not blockq's
      {"--sharded --ag-param AG_BLOCK=64", "--ag-algo"},
      {"--sharded --algo oktopk --ag-algo blockq", "--momentum-correction off"},
  };
  for (const auto& [args, mention] : cases) {
    const Result r = runTrain(args, 30);
    INFO(args << " -> " << r.output);
    CHECK(r.exitCode == 2);
    CHECK(r.output.find(mention) != std::string::npos);
  }
}

TEST_CASE("gradcomp-train: a missing dataset names the Debian package", "[train]") {
  const Result r = runTrain("--data-dir /nonexistent/fashion", 30);
  INFO(r.output);
  CHECK(r.exitCode == 1);
  CHECK(r.output.find("dataset-fashion-mnist") != std::string::npos);
  CHECK(r.output.find("/nonexistent/fashion/train-images-idx3-ubyte.gz") != std::string::npos);
}

TEST_CASE("gradcomp-train --sharded: ZeRO-2 with dense matches the allreduce run, at half the "
          "gradient bytes", "[train][mp]") {
  // The same model, data and seed: the sharded step (reduce-scatter, each
  // rank steps its shard, dense allgather) applies the same averaged
  // gradients as the allreduce run up to fp32 summation order, so the
  // epochs agree closely; the gradient traffic is the reduce-scatter's
  // (P-1)/P of each bucket, about half the ring allreduce's 2(P-1)/P (the
  // parameter allgather is not counted).
  std::map<std::string, std::vector<std::map<std::string, double>>> runs;
  for (const char* mode : {"allreduce", "sharded"}) {
    const std::string json = tempJson(mode);
    const std::string extra = std::string(mode) == "sharded" ? "--sharded " : "";
    const Result r = runTrain("--ranks 3 --algo dense --train-limit 3000 --test-limit 2000 "
                              "--epochs 2 --bucket-mb 0.5 " + extra + "-J " + json);
    INFO(mode << ": " << r.output);
    REQUIRE(r.exitCode == 0);
    if (extra.size()) CHECK(r.output.find("gradient reduce-scatter (sharded)") != std::string::npos);
    runs[mode] = readEpochs(json);
    std::remove(json.c_str());
    REQUIRE(runs[mode].size() == 2);
  }
  for (size_t e = 0; e < 2; ++e) {
    const auto& a = runs["allreduce"][e];
    const auto& s = runs["sharded"][e];
    INFO("epoch " << e + 1);
    CHECK(std::fabs(s.at("train_loss") - a.at("train_loss")) <= 0.01 * a.at("train_loss"));
    CHECK(std::fabs(s.at("test_acc") - a.at("test_acc")) <= 0.01);
    CHECK(s.at("wire_bytes") > 0.45 * a.at("wire_bytes"));
    CHECK(s.at("wire_bytes") < 0.55 * a.at("wire_bytes"));
  }
  CHECK(runs["sharded"].back().at("test_acc") > 0.60);

  // A sparse method sharded, with DGC momentum correction (auto): it learns
  // like dense on this subset (seed 1-5 bands: docs/results/accuracy/sharded)
  // and sends a fraction of dense's gradient bytes.
  const std::string json = tempJson("sharded-oktopk");
  const Result r = runTrain("--ranks 3 --algo oktopk --density 0.01 --train-limit 3000 "
                            "--test-limit 2000 --epochs 2 --bucket-mb 0.5 --sharded -J " + json);
  INFO(r.output);
  REQUIRE(r.exitCode == 0);
  CHECK(r.output.find("(momentum correction)") != std::string::npos);
  const auto sparse = readEpochs(json);
  std::remove(json.c_str());
  REQUIRE(sparse.size() == 2);
  CHECK(std::fabs(sparse.back().at("test_acc") - runs["sharded"].back().at("test_acc")) <= 0.05);
  CHECK(sparse.back().at("wire_bytes") < 0.2 * runs["sharded"].back().at("wire_bytes"));
}

TEST_CASE("gradcomp-train --sharded --ag-algo: ZeRO-3 with a compressed parameter allgather",
          "[train][mp]") {
  // ZeRO-3 with the dense allgather applies exactly what ZeRO-2 does (the
  // master shards are the parameters ZeRO-2 steps in place, and both gathers
  // are exact): the same loss and accuracy to the printed digit. Its
  // allgather sends (P-1)/P of each zero-padded bucket, as the dense
  // reduce-scatter does: the same bytes.
  const std::string common = "--ranks 3 --sharded --train-limit 3000 --test-limit 2000 "
                             "--epochs 2 --bucket-mb 0.5 ";
  std::map<std::string, std::vector<std::map<std::string, double>>> runs;
  for (const char* ag : {"zero2", "dense", "int8", "int4"}) {
    const std::string json = tempJson(ag);
    const std::string mode = std::string(ag) == "zero2" ? ""
                             : std::string(ag) == "dense" ? "--ag-algo dense "
                             : std::string(ag) == "int8" ? "--ag-algo blockq --ag-bits 8 "
                                                         : "--ag-algo blockq --ag-bits 4 ";
    const Result r = runTrain(common + mode + "-J " + json);
    INFO(ag << ": " << r.output);
    REQUIRE(r.exitCode == 0);
    runs[ag] = readEpochs(json);
    std::remove(json.c_str());
    REQUIRE(runs[ag].size() == 2);
    if (!mode.empty()) CHECK(r.output.find("ZeRO-3 parameter allgather") != std::string::npos);
  }
  for (size_t e = 0; e < 2; ++e) {
    INFO("epoch " << e + 1);
    const auto &z2 = runs["zero2"][e], &d = runs["dense"][e], &q8 = runs["int8"][e];
    CHECK(d.at("train_loss") == z2.at("train_loss"));
    CHECK(d.at("test_acc") == z2.at("test_acc"));
    CHECK(z2.at("ag_wire_bytes") == 0);  // ZeRO-2's exact gather is not counted
    CHECK(d.at("ag_wire_bytes") == d.at("wire_bytes"));
    // int8: a byte per element plus a 4-byte scale per 2048-element block
    // (AG_BLOCK's default): dense's quarter plus at most 0.1% for the
    // scales and the blocks the bucket shards leave partly filled.
    const double ratio = q8.at("ag_wire_bytes") / d.at("ag_wire_bytes");
    CHECK(ratio > 0.25);
    CHECK(ratio < 0.251);
    CHECK(q8.at("wire_bytes") == d.at("wire_bytes"));  // gradients: dense either way
  }
  // The master shards stay exact, so lossy gathers learn like dense (on this
  // subset dense reaches about 80% after 2 epochs; int8's gap is noise-size).
  // int4's step (a block's absmax / 7) is larger than most SGD updates:
  // written back into the masters they are rounded away. Measured with that
  // bug put in (docs/results/allgather.md): the loss stalls (1.77 -> 1.72)
  // at 63.6%, where the real ZeRO-3 reaches 78.7%, 1.2 points under dense.
  const double dense = runs["dense"].back().at("test_acc");
  CHECK(dense > 0.60);  // chance is 0.10
  CHECK(std::fabs(runs["int8"].back().at("test_acc") - dense) <= 0.03);
  CHECK(std::fabs(runs["int4"].back().at("test_acc") - dense) <= 0.05);
  CHECK(runs["int4"].back().at("train_loss") < 0.75 * runs["int4"].front().at("train_loss"));
}
