#include "record_table.h"

#include <algorithm>
#include <new>
#include <utility>

#include "memoplan/record/trace_of.h"

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
  record::RecordLog::Full full = record::RecordLog::Full::kNo;
  const uint64_t row = log_.append(where.path_hash, size, 64, thread_index(thread), &full);
  if (row == record::RecordLog::kNone) {
    throw std::bad_alloc();  // the session's 4M records, or memory for them, ran out
  }
  where_.push_back(Where{where.node, intern(where.inner), intern(where.outer)});
  ++counters_.recorded;
  counters_.untagged += !tagged;
  live_bytes_ += size;
  counters_.peak_live_bytes = std::max(counters_.peak_live_bytes, live_bytes_);
  return row;
}

void RecordTable::remove(uint64_t row, uint64_t thread) {
  if (row >= log_.count()) return;
  const record::Record& r = log_.at(row);
  if (r.end.load(std::memory_order_relaxed) != record::kLive) return;
  log_.close(row);
  live_bytes_ -= r.size;
  ++counters_.frees;
  counters_.cross_thread_frees += thread_index(thread) != r.thread;
}

Trace RecordTable::finish(TraceMeta meta) {
  Trace trace = record::trace_of(log_, 0, log_.count(), log_.tick());
  trace.meta = std::move(meta);
  counters_.escapes = 0;
  for (size_t i = 0; i < trace.allocations.size(); ++i) {
    Allocation& a = trace.allocations[i];
    a.align = 0;  // c10's 64 bytes: the trace's default
    a.provenance.op = names_[where_[i].inner];
    a.provenance.outer_op = names_[where_[i].outer];
    a.provenance.node = where_[i].node;
    counters_.escapes += a.escapes;
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
