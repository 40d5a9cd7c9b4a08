// Fashion-MNIST from the IDX files of Debian's dataset-fashion-mnist package
// (/usr/share/datasets/fashion-mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz).
// IDX: big-endian magic 0x00000803 (u8 images, 3 dims n x rows x cols) or
// 0x00000801 (u8 labels, 1 dim n), then the dims, then the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace gradcomp::train {

constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";
constexpr const char* kDatasetPackage = "dataset-fashion-mnist";

// Images as float, normalized with the Fashion-MNIST training mean and std
// (pixel/255 - 0.2860) / 0.3530, row-major n x rows x cols; labels 0..9.
struct Dataset {
  int rows = 0, cols = 0;
  std::vector<float> images;
  std::vector<uint8_t> labels;
  size_t size() const { return labels.size(); }
  size_t pixels() const { return size_t(rows) * cols; }
  const float* image(size_t i) const { return images.data() + i * pixels(); }
};

// Reads <dir>/<prefix>-images-idx3-ubyte.gz and <dir>/<prefix>-labels-idx1-ubyte.gz
// (prefix "train" or "t10k"), keeping the first `limit` samples (0 = all).
// A missing file is an InvalidArgument naming the path and the Debian package
// to install; a malformed one names the file and what was wrong.
Status loadFashionMnist(const std::string& dir, const std::string& prefix, size_t limit,
                        Dataset* out);

// Raw IDX reading (tests use it on files they write). `expectDims` is 3 for
// images, 1 for labels; dims receives the dimension sizes.
Status readIdxGz(const std::string& path, int expectDims, std::vector<uint32_t>* dims,
                 std::vector<uint8_t>* data);

}  // namespace gradcomp::train
