#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/npy.hpp"
#include "core/tensor.hpp"
#include "core/threading.hpp"
#include "ops/shape_util.hpp"
#include "test_util.hpp"

using namespace edgetrain;

TEST(Tensor, OwnedMemoryIsAligned) {
  Tensor t(DataType::kFloat32, {3, 5});
  EXPECT_EQ(t.numel(), 15);
  EXPECT_EQ(t.nbytes(), 60u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % kTensorAlignment, 0u);
}

#if defined(__linux__)
// The VmFlags line of the /proc/self/smaps entry of the mapping that holds `address` ("" when none does).
std::string MappingFlags(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2) {  // a mapping's first line
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

// Tensors from 4 MiB up start on a 2 MiB boundary and ask for transparent huge pages (unless EDGETRAIN_HUGE_PAGES=0);
// smaller ones do not.
TEST(Tensor, LargeTensorsAskForHugePages) {
  const char* choice = std::getenv("EDGETRAIN_HUGE_PAGES");
  const bool allowed = !(choice && std::string(choice) == "0");  // EDGETRAIN_HUGE_PAGES=0 turns them off
  Tensor large(DataType::kFloat32, {3 * 1024 * 1024 + 5});  // 12 MiB and 20 bytes
  const auto address = reinterpret_cast<uintptr_t>(large.raw());
  if (allowed) EXPECT_EQ(address % (size_t{2} << 20), 0u);
  large.data<float>()[large.numel() - 1] = 7;  // the whole tensor is mapped
  EXPECT_EQ(large.data<float>()[large.numel() - 1], 7);
#if defined(__x86_64__)  // qemu-user, which runs the aarch64 build's tests in CI, drops madvise
  EXPECT_EQ(MappingFlags(large.raw()).find(" hg") != std::string::npos, allowed) << MappingFlags(large.raw());
#endif
  Tensor small(DataType::kFloat32, {512 * 1024});  // 2 MiB: mapped, on small pages
  EXPECT_EQ(MappingFlags(small.raw()).find(" hg"), std::string::npos) << MappingFlags(small.raw());
  const void* freed = large.raw();
  large = Tensor();
  EXPECT_EQ(MappingFlags(freed), "");  // handed back whole
}
#endif

TEST(Tensor, BorrowedMemoryIsNotCopied) {
  std::vector<float> data = {1, 2, 3, 4};
  Tensor t = Tensor::Borrow(DataType::kFloat32, {2, 2}, data.data());
  t.data<float>()[3] = 9;
  EXPECT_EQ(data[3], 9);
  Tensor c = t.Clone();
  c.data<float>()[0] = -1;
  EXPECT_EQ(data[0], 1);
}

TEST(Tensor, WrongTypeAccessIsAnError) {
  Tensor t(DataType::kInt64, {2});
  EXPECT_ERROR(t.data<float>(), ErrorCode::kInternal, "int64");
}

TEST(Tensor, ElementReadsConvertAndCheckTheIndex) {
  const Tensor ints = Tensor::FromVector<int32_t>({7, -3}, {2});
  EXPECT_EQ(ints.Int64At(1), -3);
  EXPECT_EQ(ints.DoubleAt(0), 7.0);
  EXPECT_EQ(Tensor::FromVector<float>({2.5f}, {1}).DoubleAt(0), 2.5);
  EXPECT_ERROR(ints.Int64At(2), ErrorCode::kInvalidArgument, "element 2 of a int32 tensor of shape [2] does not exist");
  EXPECT_ERROR(Tensor::Zeros(DataType::kFloat32, {0}).DoubleAt(0), ErrorCode::kInvalidArgument, "does not exist");
  EXPECT_ERROR(Tensor::FromVector<float>({1.0f}, {1}).Int64At(0), ErrorCode::kInvalidArgument,
               "expected an integer tensor");
}

TEST(Tensor, AbsurdSizeIsRefusedBeforeAllocating) {
  EXPECT_ERROR(Tensor(DataType::kFloat32, {1 << 20, 1 << 20, 1 << 10}, "weights"), ErrorCode::kResourceExhausted,
               "weights");
  EXPECT_ERROR(Tensor(DataType::kFloat32, {int64_t{1} << 62, 8}), ErrorCode::kResourceExhausted, "too many elements");
}

TEST(Tensor, Float16RoundTrip) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) EXPECT_EQ(static_cast<float>(Float16(v)), v);
  EXPECT_EQ(static_cast<float>(Float16(1.0f + 1.0f / 4096)), 1.0f);  // rounds to nearest even
  EXPECT_TRUE(std::isinf(static_cast<float>(Float16(1e6f))));
  EXPECT_EQ(static_cast<float>(BFloat16(1.5f)), 1.5f);
}

TEST(Broadcast, Shapes) {
  EXPECT_EQ(BroadcastShapes({2, 1, 4}, {3, 1}), (Shape{2, 3, 4}));
  EXPECT_EQ(BroadcastShapes({}, {5}), (Shape{5}));
  EXPECT_EQ(BroadcastStrides({3, 1}, {2, 3, 4}), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_ERROR(BroadcastShapes({2, 3}, {4}), ErrorCode::kInvalidArgument, "[2, 3] and [4]");
}

TEST(ThreadPool, CoversTheRangeOnce) {
  ThreadPool pool(2);
  std::vector<int> hits(1000, 0);
  for (int round = 0; round < 50; ++round)
    pool.ParallelFor(1000, 10, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ++hits[i];
    });
  for (int h : hits) EXPECT_EQ(h, 50);
}

TEST(Npy, RoundTripAndBadFiles) {
  std::string dir = ::testing::TempDir();
  Tensor t = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  WriteNpy(dir + "/a.npy", t);
  Tensor r = ReadNpy(dir + "/a.npy");
  EXPECT_EQ(r.shape(), t.shape());
  EXPECT_EQ(r.ToVector<float>(), t.ToVector<float>());
  Tensor s = Tensor::Scalar<int64_t>(7);
  WriteNpy(dir + "/s.npy", s);
  EXPECT_EQ(ReadNpy(dir + "/s.npy").ToVector<int64_t>(), std::vector<int64_t>{7});
  EXPECT_ERROR(ReadNpy(dir + "/missing.npy"), ErrorCode::kIoError, "missing.npy");
  std::filesystem::resize_file(dir + "/a.npy", 130);
  EXPECT_ERROR(ReadNpy(dir + "/a.npy"), ErrorCode::kInvalidArgument, "needs 24");
}

// Transposes through StridedCopy on shapes that take its tiled path (8 x 8 register blocks for
// 4-byte elements, with edges left over on both sides), element by element against the definition.
TEST(StridedCopy, TransposesFourByteElementsInBlocksAndEdges) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (const Shape& shape : {Shape{37, 45}, Shape{3, 21, 35}, Shape{16, 16}, Shape{2, 40, 17}}) {
      const size_t rank = shape.size();
      Shape out_shape = shape;
      std::swap(out_shape[rank - 1], out_shape[rank - 2]);
      Shape src_strides = RowMajorStrides(shape);
      std::swap(src_strides[rank - 1], src_strides[rank - 2]);
      const int64_t count = NumElements(shape);
      std::vector<int32_t> src(static_cast<size_t>(count)), dst(static_cast<size_t>(count), -1);
      for (int64_t i = 0; i < count; ++i) src[static_cast<size_t>(i)] = static_cast<int32_t>(i * 7 + 1);
      StridedCopy(pool, DataType::kInt32, "transpose", out_shape, src_strides, src.data(), RowMajorStrides(out_shape),
                  dst.data());
      const int64_t rows = shape[rank - 2], cols = shape[rank - 1], planes = count / (rows * cols);
      for (int64_t p = 0; p < planes; ++p)
        for (int64_t c = 0; c < cols; ++c)
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_EQ(dst[static_cast<size_t>((p * cols + c) * rows + r)], src[static_cast<size_t>((p * rows + r) * cols + c)])
                << ShapeToString(shape) << " on " << threads << " thread(s) at plane " << p << ", row " << r
                << ", column " << c;
    }
  }
}
