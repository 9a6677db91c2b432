// record::RecordLog and record::trace_of: records and their clock, closing from the owner and from
// elsewhere, capacity and memory failures, and the trace a stretch of records becomes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "memoplan/record/record_log.h"
#include "memoplan/record/trace_of.h"

namespace memoplan::record {
namespace {

TEST(RecordLog, AppendsAndClosesOnItsClock) {
  RecordLog log;
  RecordLog::Full full;
  EXPECT_EQ(log.append(11, 100, 16, 0, &full), 0u);
  EXPECT_EQ(log.append(12, 200, 64, 0, &full), 1u);
  log.close(0);
  log.close_foreign(1);
  EXPECT_EQ(log.count(), 2u);
  EXPECT_EQ(log.tick(), 3u);
  EXPECT_EQ(log.at(0).begin, 0u);
  EXPECT_EQ(log.at(0).end.load(), 2u);
  EXPECT_EQ(log.at(1).end.load(), kForeign);
  EXPECT_GT(log.footprint_bytes(), 0u);
  log.clear();
  EXPECT_EQ(log.count(), 0u);
  EXPECT_EQ(log.footprint_bytes(), 0u);
}

TEST(RecordLog, SpansChunks) {
  RecordLog log;
  RecordLog::Full full;
  const uint64_t n = RecordLog::kPerChunk * 2 + 5;
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(log.append(i, i + 1, 16, 0, &full), i);
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(log.at(i).key, i);
}

void* no_memory(size_t) { return nullptr; }
void no_release(void*, size_t) {}

TEST(RecordLog, SaysWhenOutOfMemory) {
  RecordLog log(MemorySource{&no_memory, &no_release});
  RecordLog::Full full = RecordLog::Full::kNo;
  EXPECT_EQ(log.append(1, 1, 16, 0, &full), RecordLog::kNone);
  EXPECT_EQ(full, RecordLog::Full::kOutOfMemory);
}

// Memory that is not zero: what a malloc-backed source gives (the shim's).
void* dirty_memory(size_t bytes) {
  void* p = malloc(bytes);
  if (p) memset(p, 0xab, bytes);
  return p;
}
void dirty_release(void* p, size_t) { free(p); }

TEST(RecordLog, NeedsNoZeroedMemory) {
  RecordLog log(MemorySource{&dirty_memory, &dirty_release});
  RecordLog::Full full = RecordLog::Full::kNo;
  const uint64_t n = RecordLog::kPerChunk + 3;  // into a second chunk
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(log.append(i, i + 1, 16, 7, &full), i);
  log.close(1);
  for (uint64_t i = 0; i < n; ++i) {
    EXPECT_EQ(log.at(i).size, i + 1);
    EXPECT_EQ(log.at(i).thread, 7u);
    EXPECT_EQ(log.at(i).end.load(), i == 1 ? n : kLive);
  }
  EXPECT_EQ(log.footprint_bytes(),
            RecordLog::kChunks * sizeof(Record*) + 2 * RecordLog::kPerChunk * sizeof(Record));
  log.clear();
  EXPECT_EQ(log.footprint_bytes(), 0u);
}

TEST(TraceOf, EscapesWhatOutlivesTheCut) {
  RecordLog log;
  RecordLog::Full full;
  log.append(1, 100, 16, 3, &full);   // 0: freed at 2
  log.append(2, 200, 256, 3, &full);  // 1: freed after the cut
  log.close(0);                       // tick 2
  log.append(3, 300, 16, 3, &full);   // 2: alive
  log.append(4, 400, 16, 3, &full);   // 3: freed elsewhere
  log.close(1);                       // tick 5
  log.close_foreign(3);
  const Trace trace = trace_of(log, 0, 4, 4);
  ASSERT_EQ(trace.allocations.size(), 4u);
  EXPECT_FALSE(trace.allocations[0].escapes);
  EXPECT_EQ(trace.allocations[0].end, 2u);
  EXPECT_TRUE(trace.allocations[1].escapes);
  EXPECT_EQ(trace.allocations[1].end, 4u);
  EXPECT_EQ(trace.allocations[1].align, 256u) << "stricter than the default: said";
  EXPECT_EQ(trace.allocations[0].align, 0u);
  EXPECT_TRUE(trace.allocations[2].escapes);
  EXPECT_TRUE(trace.allocations[3].escapes);
  EXPECT_EQ(trace.allocations[2].provenance.callsite, 3u);
  EXPECT_EQ(trace.allocations[2].provenance.thread, 3u);
}

TEST(TraceOf, IndicesPickRecordsAndNumberThemFromZero) {
  RecordLog log;
  RecordLog::Full full;
  log.append(1, 100, 16, 0, &full);  // 0
  log.append(2, 200, 16, 0, &full);  // 1: left out
  log.close(0);                      // tick 2
  log.append(3, 300, 16, 0, &full);  // 2
  log.close(2);                      // tick 4
  const uint64_t indices[] = {0, 2};
  const Trace trace = trace_of_indices(log, indices, 2, 5);
  ASSERT_EQ(trace.allocations.size(), 2u);
  EXPECT_EQ(trace.allocations[0].id, 0u);
  EXPECT_EQ(trace.allocations[1].id, 1u);
  EXPECT_EQ(trace.allocations[1].size, 300u);
  EXPECT_EQ(trace.allocations[1].begin, 3u);
  EXPECT_EQ(trace.allocations[1].end, 4u);
  EXPECT_FALSE(trace.allocations[1].escapes);
}

}  // namespace
}  // namespace memoplan::record
