#include "tools/gradcomp-train/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <memory>

namespace gradcomp::train {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

uint32_t bigEndian32(const uint8_t* b) {
  return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | b[3];
}

}  // namespace

Status readIdxGz(const std::string& path, int expectDims, std::vector<uint32_t>* dims,
                 std::vector<uint8_t>* data) {
  struct stat st;
  GC_REQUIRE(stat(path.c_str(), &st) == 0, Err::InvalidArgument,
             "dataset file %s not found: install the Debian package %s "
             "(apt-get install %s) or pass --data-dir with the IDX .gz files",
             path.c_str(), kDatasetPackage, kDatasetPackage);
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  GC_REQUIRE(f, Err::SystemError, "cannot open %s with zlib", path.c_str());
  auto readExact = [&f](void* buf, size_t n) {
    size_t got = 0;
    while (got < n) {  // gzread takes an unsigned count; read large files in pieces
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
      const int r = gzread(f.get(), static_cast<uint8_t*>(buf) + got, chunk);
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  };
  uint8_t header[4];
  GC_REQUIRE(readExact(header, 4), Err::InvalidArgument, "%s: truncated IDX header", path.c_str());
  GC_REQUIRE(header[0] == 0 && header[1] == 0 && header[2] == 0x08 && header[3] == expectDims,
             Err::InvalidArgument,
             "%s: IDX magic %02x%02x%02x%02x, expected 000008%02x (unsigned bytes, %d dims)",
             path.c_str(), header[0], header[1], header[2], header[3], expectDims, expectDims);
  dims->assign(expectDims, 0);
  size_t total = 1;
  for (int d = 0; d < expectDims; ++d) {
    uint8_t b[4];
    GC_REQUIRE(readExact(b, 4), Err::InvalidArgument, "%s: truncated IDX dimensions",
               path.c_str());
    (*dims)[d] = bigEndian32(b);
    total *= (*dims)[d];
  }
  GC_REQUIRE(total <= (size_t(1) << 34), Err::InvalidArgument, "%s: implausible IDX size %zu",
             path.c_str(), total);
  data->resize(total);
  GC_REQUIRE(readExact(data->data(), total), Err::InvalidArgument,
             "%s: truncated IDX data (dims promise %zu bytes)", path.c_str(), total);
  return Status::Ok();
}

Status loadFashionMnist(const std::string& dir, const std::string& prefix, size_t limit,
                        Dataset* out) {
  const std::string imagePath = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string labelPath = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  std::vector<uint32_t> imageDims, labelDims;
  std::vector<uint8_t> pixels, labels;
  GC_CHECK(readIdxGz(imagePath, 3, &imageDims, &pixels));
  GC_CHECK(readIdxGz(labelPath, 1, &labelDims, &labels));
  GC_REQUIRE(imageDims[0] == labelDims[0], Err::InvalidArgument,
             "%s has %u images but %s has %u labels", imagePath.c_str(), imageDims[0],
             labelPath.c_str(), labelDims[0]);
  for (size_t i = 0; i < labels.size(); ++i)
    GC_REQUIRE(labels[i] < 10, Err::InvalidArgument, "%s: label %u at index %zu is not in 0..9",
               labelPath.c_str(), labels[i], i);
  const size_t n = limit == 0 ? labels.size() : std::min<size_t>(limit, labels.size());
  out->rows = static_cast<int>(imageDims[1]);
  out->cols = static_cast<int>(imageDims[2]);
  out->labels.assign(labels.begin(), labels.begin() + n);
  out->images.resize(n * out->pixels());
  // Fashion-MNIST training-set statistics; fixed constants so every split and
  // subset is normalized the same way.
  constexpr float kMean = 0.2860f, kStd = 0.3530f;
  for (size_t i = 0; i < out->images.size(); ++i)
    out->images[i] = (pixels[i] / 255.0f - kMean) / kStd;
  return Status::Ok();
}

}  // namespace gradcomp::train
