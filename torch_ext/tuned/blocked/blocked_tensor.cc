// Blocked activations and the layouts of the region's tensors (blocked_tensor.h): the tag that
// names a blocked activation, making tensors of each layout, telling a tensor's layout and
// converting between layouts.
#include "blocked_tensor.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>

#include <cstring>

#include "blocked.h"
#include "memoplan/onednn/onednn.h"

namespace memoplan::torch_ext::blocked {
namespace {

using onednn::Format;
using onednn::Shape;

// After the values of every blocked activation, a tag that names it: its strides cannot (with C a
// multiple of the block they are NCHW's), and a region op must tell a plain tensor from it rather
// than read it in the wrong order. 64 bytes, inside the allocation the memory plan covers.
struct Tag {
  uint64_t magic;
  int64_t n, c, h, w, block;
};
constexpr uint64_t kTagMagic = 0x6b636f6c626d656dULL;  // "memblock"
constexpr int64_t kTagFloats = 16;
static_assert(sizeof(Tag) <= kTagFloats * sizeof(float));
static_assert(sizeof(Tag) == 6 * sizeof(int64_t), "no padding: tags are compared bytewise");

int64_t blocked_floats(const Shape& s) { return s.n * onednn::padded_channels(s.c) * s.h * s.w; }

Tag tag_of(const Shape& s) { return {kTagMagic, s.n, s.c, s.h, s.w, onednn::block_size()}; }

// The region's tensors come from ATen's CPU constructor itself (at::detail::empty_cpu: the CPU
// allocator, so memoplan's plan where one runs, as at::empty), not through the dispatcher: a
// convolution of a small net costs more in its calls than in its arithmetic
// (bench/node_overhead.py --graph conv).
at::Tensor cpu_empty(at::IntArrayRef sizes, const at::TensorOptions& options,
                     c10::optional<at::MemoryFormat> format = c10::nullopt) {
  return at::detail::empty_cpu(sizes, c10::typeMetaToScalarType(options.dtype()),
                               /*pin_memory=*/false, format);
}

// The flat storage, then its 4-d strides set in place (no view: one TensorImpl).
at::Tensor new_blocked(const Shape& s, const at::TensorOptions& options) {
  const int64_t cp = onednn::padded_channels(s.c);
  at::Tensor t = cpu_empty({blocked_floats(s) + kTagFloats}, options.dtype(at::kFloat));
  const Tag tag = tag_of(s);
  std::memcpy(t.data_ptr<float>() + blocked_floats(s), &tag, sizeof tag);
  const int64_t sizes[] = {s.n, s.c, s.h, s.w}, strides[] = {cp * s.h * s.w, s.h * s.w, s.w, 1};
  t.unsafeGetTensorImpl()->set_sizes_and_strides(at::IntArrayRef(sizes), at::IntArrayRef(strides));
  return t;
}

}  // namespace

Shape shape_of(const at::Tensor& x) { return {x.size(0), x.size(1), x.size(2), x.size(3)}; }

at::Tensor scratchpad(size_t bytes, const at::TensorOptions& options) {
  return bytes == 0 ? at::Tensor()
                    : cpu_empty({static_cast<int64_t>(bytes)}, options.dtype(at::kByte));
}
void* data_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

at::Tensor new_tensor(const Shape& s, Format f, const at::TensorOptions& options) {
  switch (f) {
    case Format::kBlocked:
      return new_blocked(s, options);
    case Format::kNhwc:
      return cpu_empty({s.n, s.c, s.h, s.w}, options.dtype(at::kFloat),
                       at::MemoryFormat::ChannelsLast);
    case Format::kNchw:
      break;
  }
  return cpu_empty({s.n, s.c, s.h, s.w}, options.dtype(at::kFloat));
}

// A 4-d float CPU activation in one of the three layouts: `x` itself where it is, else x as
// contiguous NCHW floats.
at::Tensor dense(const at::Tensor& x, const char* op) {
  // oneDNN splits over OpenMP's threads: this thread's count set as aten's (a new inference
  // thread would otherwise start at one per core).
  at::internal::lazy_init_num_threads();
  TORCH_CHECK(x.dim() == 4 && x.device().is_cpu() && x.is_floating_point(), "memoplan::", op,
              ": a blocked-layout region expected a 4-d float activation, got ", x.toString(),
              " of sizes ", x.sizes(), " (MEMOPLAN_BLOCKED_LAYOUT=0 turns the blocked layout off)");
  if (x.scalar_type() == at::kFloat &&
      (x.is_contiguous() || x.is_contiguous(at::MemoryFormat::ChannelsLast) || is_blocked(x))) {
    return x;
  }
  return x.to(at::kFloat).contiguous();
}

bool is_blocked(const at::Tensor& x) {
  if (x.dim() != 4 || x.scalar_type() != at::kFloat || !x.device().is_cpu() ||
      x.storage_offset() != 0 || !x.storage().data()) {
    return false;
  }
  const Shape s = shape_of(x);
  const int64_t cp = onednn::padded_channels(s.c);
  if (x.strides() != at::IntArrayRef({cp * s.h * s.w, s.h * s.w, s.w, 1}) ||
      x.storage().nbytes() != static_cast<size_t>(blocked_floats(s) + kTagFloats) * sizeof(float)) {
    return false;
  }
  const Tag expected = tag_of(s);
  return std::memcmp(static_cast<const float*>(x.storage().data()) + blocked_floats(s), &expected,
                     sizeof expected) == 0;
}

Format format_of(const at::Tensor& x) {
  if (is_blocked(x)) return Format::kBlocked;
  return !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast) ? Format::kNhwc
                                                                               : Format::kNchw;
}

at::Tensor convert(const at::Tensor& x_in, Format to) {
  const at::Tensor x = dense(x_in, "blayout");
  if (format_of(x) == to) return x;
  at::Tensor out = new_tensor(shape_of(x), to, x.options());
  convert_into(out, x);
  return out;
}

void convert_into(const at::Tensor& target, const at::Tensor& x_in, const char* op) {
  const at::Tensor x = dense(x_in, op);
  const Format from = format_of(x), to = format_of(target);
  if (from != Format::kBlocked && to != Format::kBlocked) {
    target.copy_(x);
    return;
  }
  if (x.numel() == 0) return;
  onednn::reorder(shape_of(x), from, to)
      ->run(x.data_ptr<float>(), nullptr, target.data_ptr<float>(), nullptr);
}

at::Tensor to_plain(const at::Tensor& x) { return convert(x, Format::kNchw); }
at::Tensor to_blocked(const at::Tensor& x) { return convert(x, Format::kBlocked); }

at::Tensor write_into(const at::Tensor& target, const at::Tensor& values) {
  TORCH_CHECK(values.sizes() == target.sizes(), "memoplan::blayout_back_: sizes ", values.sizes(),
              " written into an activation of sizes ", target.sizes());
  if (values.data_ptr() == target.data_ptr()) return target;  // the use wrote into it
  if (!is_blocked(target)) {
    target.copy_(values);
    return target;
  }
  convert_into(target, values, "blayout_back_");
  return target;
}

}  // namespace memoplan::torch_ext::blocked
