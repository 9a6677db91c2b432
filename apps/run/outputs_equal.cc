#include "outputs_equal.h"

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

namespace memoplan::run {
namespace {

std::string tensor_difference(const at::Tensor& a, const at::Tensor& b, const std::string& where) {
  if (a.defined() != b.defined()) return where + ": one tensor is undefined";
  if (!a.defined()) return "";
  if (a.scalar_type() != b.scalar_type()) return where + ": dtypes differ";
  if (a.sizes() != b.sizes()) return where + ": shapes differ";
  const at::Tensor ca = a.contiguous(), cb = b.contiguous();
  const size_t bytes = ca.numel() * ca.element_size();
  if (bytes && std::memcmp(ca.data_ptr(), cb.data_ptr(), bytes) != 0) {
    return where + ": bytes differ";
  }
  return "";
}

std::string difference(const c10::IValue& a, const c10::IValue& b, const std::string& where) {
  if (a.tagKind() != b.tagKind()) return where + ": " + a.tagKind() + " vs " + b.tagKind();
  if (a.isTensor()) return tensor_difference(a.toTensor(), b.toTensor(), where);
  if (a.isTuple() || a.isList()) {
    const auto& ea = a.isTuple() ? a.toTupleRef().elements() : a.toListRef();
    const auto& eb = b.isTuple() ? b.toTupleRef().elements() : b.toListRef();
    if (ea.size() != eb.size()) return where + ": lengths differ";
    for (size_t i = 0; i < ea.size(); ++i) {
      std::string d = difference(ea[i], eb[i], where + "[" + std::to_string(i) + "]");
      if (!d.empty()) return d;
    }
    return "";
  }
  if (a.isGenericDict()) {
    const c10::Dict<c10::IValue, c10::IValue> da = a.toGenericDict(), db = b.toGenericDict();
    if (da.size() != db.size()) return where + ": dict sizes differ";
    for (auto ia = da.begin(), ib = db.begin(); ia != da.end(); ++ia, ++ib) {
      if (!(ia->key() == ib->key())) return where + ": dict keys differ";
      const std::string key = ia->key().isString() ? ia->key().toStringRef() : "?";
      std::string d = difference(ia->value(), ib->value(), where + "[\"" + key + "\"]");
      if (!d.empty()) return d;
    }
    return "";
  }
  // Scalars, strings, None. Doubles by their bits: NaN equals NaN, -0.0 differs from 0.0.
  if (a.isDouble()) {
    const double x = a.toDouble(), y = b.toDouble();
    return std::memcmp(&x, &y, sizeof x) == 0 ? "" : where + ": values differ";
  }
  return a == b ? "" : where + ": values differ";
}

double relative(const c10::IValue& a, const c10::IValue& b) {
  if (a.tagKind() != b.tagKind()) return -1;
  if (a.isTensor()) {
    const at::Tensor& x = a.toTensor();
    const at::Tensor& y = b.toTensor();
    if (x.defined() != y.defined() ||
        (x.defined() && (x.scalar_type() != y.scalar_type() || x.sizes() != y.sizes()))) {
      return -1;
    }
    if (!x.defined() || x.numel() == 0) return 0;
    if (!x.is_floating_point()) return tensor_difference(x, y, "").empty() ? 0 : -1;
    const double scale = y.abs().max().item<double>();
    const double diff = (x.to(at::kDouble) - y.to(at::kDouble)).abs().max().item<double>();
    return scale > 0 ? diff / scale : diff;
  }
  if (a.isTuple() || a.isList()) {
    const auto& ea = a.isTuple() ? a.toTupleRef().elements() : a.toListRef();
    const auto& eb = b.isTuple() ? b.toTupleRef().elements() : b.toListRef();
    if (ea.size() != eb.size()) return -1;
    double worst = 0;
    for (size_t i = 0; i < ea.size(); ++i) {
      const double r = relative(ea[i], eb[i]);
      if (r < 0) return -1;
      worst = std::max(worst, r);
    }
    return worst;
  }
  if (a.isGenericDict()) {  // segmentation models return {"out": ..., "aux": ...}
    const c10::Dict<c10::IValue, c10::IValue> da = a.toGenericDict(), db = b.toGenericDict();
    if (da.size() != db.size()) return -1;
    double worst = 0;
    for (auto ia = da.begin(), ib = db.begin(); ia != da.end(); ++ia, ++ib) {
      if (!(ia->key() == ib->key())) return -1;
      const double r = relative(ia->value(), ib->value());
      if (r < 0) return -1;
      worst = std::max(worst, r);
    }
    return worst;
  }
  return difference(a, b, "").empty() ? 0 : -1;
}

}  // namespace

double max_relative_difference(const c10::IValue& a, const c10::IValue& b) {
  return relative(a, b);
}

std::string output_difference(const c10::IValue& a, const c10::IValue& b) {
  return difference(a, b, "output");
}

}  // namespace memoplan::run
