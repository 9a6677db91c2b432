#include "record_table.h"

#include <algorithm>
#include <utility>

namespace memoplan::torch_ext {

RecordTable::RecordTable(uint64_t first_thread) {
  names_.emplace_back();
  name_index_.emplace("", 0);
  threads_.push_back(first_thread);
  counters_.threads = 1;
}

void RecordTable::count_request(bool zero_byte) {
  ++counters_.requests;
  counters_.zero_byte += zero_byte;
}

uint64_t RecordTable::add(uint64_t size, bool tagged, uint64_t thread, const OpContext& where) {
  const uint64_t row = rows_.size();
  rows_.push_back(Row{size, tick_++, 0, where.path_hash, where.node, thread_index(thread),
                      intern(where.inner), intern(where.outer), true});
  ++counters_.recorded;
  counters_.untagged += !tagged;
  live_bytes_ += size;
  counters_.peak_live_bytes = std::max(counters_.peak_live_bytes, live_bytes_);
  return row;
}

void RecordTable::remove(uint64_t row, uint64_t thread) {
  if (row >= rows_.size() || !rows_[row].alive) return;
  Row& r = rows_[row];
  r.alive = false;
  r.end = tick_++;
  live_bytes_ -= r.size;
  ++counters_.frees;
  counters_.cross_thread_frees += thread_index(thread) != r.thread;
}

Trace RecordTable::finish(TraceMeta meta) {
  Trace trace;
  trace.meta = std::move(meta);
  trace.allocations.reserve(rows_.size());
  counters_.escapes = 0;
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row& r = rows_[i];
    Allocation a;
    a.id = i;
    a.size = r.size;
    a.begin = r.begin;
    a.end = r.alive ? tick_ : r.end;
    a.escapes = r.alive;
    a.provenance.op = names_[r.inner];
    a.provenance.outer_op = names_[r.outer];
    a.provenance.node = r.node;
    a.provenance.callsite = r.path_hash;
    a.provenance.thread = r.thread;
    counters_.escapes += r.alive;
    trace.allocations.push_back(std::move(a));
  }
  return trace;
}

uint32_t RecordTable::intern(const char* name) {
  if (!name || !*name) return 0;
  lookup_.assign(name);
  auto it = name_index_.find(lookup_);
  if (it != name_index_.end()) return it->second;
  const auto index = static_cast<uint32_t>(names_.size());
  names_.push_back(lookup_);
  name_index_.emplace(lookup_, index);
  return index;
}

uint32_t RecordTable::thread_index(uint64_t thread) {
  // A pass has a handful of threads: a scan beats hashing.
  for (size_t i = 0; i < threads_.size(); ++i) {
    if (threads_[i] == thread) return static_cast<uint32_t>(i);
  }
  threads_.push_back(thread);
  counters_.threads = threads_.size();
  return static_cast<uint32_t>(threads_.size() - 1);
}

}  // namespace memoplan::torch_ext
