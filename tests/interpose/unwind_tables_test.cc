// The unwind tables' pages go back after an unwind (interpose/unwind_tables.h): a page of this
// program's .eh_frame_hdr that was read is no longer mapped afterwards, reads the same when read
// again, and nothing outside the tables moves (a written global, a read-only constant).
#include "unwind_tables.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <link.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace memoplan::shim::testing {
namespace {

// Whether the page holding `address` is mapped into this process (/proc/self/pagemap, bit 63).
bool mapped(uintptr_t address) {
  const int fd = open("/proc/self/pagemap", O_RDONLY);
  if (fd < 0) return true;
  uint64_t entry = 0;
  const off_t at = static_cast<off_t>(address / getpagesize() * sizeof entry);
  const bool read_it = pread(fd, &entry, sizeof entry, at) == sizeof entry;
  close(fd);
  return !read_it || (entry >> 63) != 0;
}

struct Tables {
  uintptr_t eh_frame_hdr = 0;
  size_t size = 0;
};

// This program's own .eh_frame_hdr (the first object dl_iterate_phdr reports).
Tables own_tables() {
  Tables t;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto& out = *static_cast<Tables*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME) {
            out.eh_frame_hdr = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
            out.size = info->dlpi_phdr[i].p_memsz;
          }
        }
        return 1;  // the program itself only
      },
      &t);
  return t;
}

int written_global = 1;
const char kConstant[] = "a read-only constant";

TEST(UnwindTables, ReadPagesOfTheTablesAreGivenBack) {
  const Tables tables = own_tables();
  ASSERT_NE(tables.eh_frame_hdr, 0u) << "precondition: the test program has .eh_frame_hdr";
  // A page wholly inside the table (the segment's partial pages are left alone).
  const uintptr_t page = static_cast<uintptr_t>(getpagesize());
  const uintptr_t probe = (tables.eh_frame_hdr + page) & ~(page - 1);
  if (probe + page > tables.eh_frame_hdr + tables.size) GTEST_SKIP() << "table under two pages";
  unsigned char before[64];
  memcpy(before, reinterpret_cast<const void*>(probe), sizeof before);
  ASSERT_TRUE(mapped(probe)) << "precondition: reading the table maps its page";
  written_global = 42;

  const uintptr_t in_this_program = reinterpret_cast<uintptr_t>(&own_tables);
  release_unwind_tables(&in_this_program, 1);

  EXPECT_FALSE(mapped(probe));
  EXPECT_EQ(memcmp(before, reinterpret_cast<const void*>(probe), sizeof before), 0);
  EXPECT_EQ(written_global, 42);
  EXPECT_STREQ(kConstant, "a read-only constant");
}

TEST(UnwindTables, TablesOfOtherLibrariesStay) {
  const Tables tables = own_tables();
  ASSERT_NE(tables.eh_frame_hdr, 0u);
  const uintptr_t page = static_cast<uintptr_t>(getpagesize());
  const uintptr_t probe = (tables.eh_frame_hdr + page) & ~(page - 1);
  if (probe + page > tables.eh_frame_hdr + tables.size) GTEST_SKIP() << "table under two pages";
  volatile unsigned char touch = *reinterpret_cast<const volatile unsigned char*>(probe);
  (void)touch;
  ASSERT_TRUE(mapped(probe));
  // An address in another library (the first one named, not the vDSO): only its tables go.
  uintptr_t elsewhere = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        if (!info->dlpi_name[0] || strstr(info->dlpi_name, "vdso")) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          if (info->dlpi_phdr[i].p_type == PT_LOAD) {
            *static_cast<uintptr_t*>(data) = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
            return 1;
          }
        }
        return 0;
      },
      &elsewhere);
  ASSERT_NE(elsewhere, 0u);
  release_unwind_tables(&elsewhere, 1);
  EXPECT_TRUE(mapped(probe));
}

}  // namespace
}  // namespace memoplan::shim::testing
