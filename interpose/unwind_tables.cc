// Dropping the unwind tables' pages after an unwind (unwind_tables.h says why it is safe).
#include "unwind_tables.h"

#include <link.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

namespace memoplan::shim {
namespace {

struct Query {
  const uintptr_t* addresses;
  unsigned count;
  uintptr_t vdso;  // the vDSO's ELF header: its pages are the kernel's, left alone
};

bool in(uintptr_t address, uintptr_t begin, uintptr_t end) {
  return address >= begin && address < end;
}

// The loader applies text relocations by writing to the code's own pages; dropping those would
// undo them.
bool has_text_relocations(const dl_phdr_info& info, const ElfW(Phdr) * dynamic) {
  if (!dynamic) return false;
  for (const auto* d = reinterpret_cast<const ElfW(Dyn)*>(info.dlpi_addr + dynamic->p_vaddr);
       d->d_tag != DT_NULL; ++d) {
    if (d->d_tag == DT_TEXTREL) return true;
    if (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_TEXTREL)) return true;
  }
  return false;
}

int visit(dl_phdr_info* info, size_t, void* data) {
  const Query& query = *static_cast<const Query*>(data);
  const ElfW(Phdr)* eh_frame_hdr = nullptr;
  const ElfW(Phdr)* dynamic = nullptr;
  const ElfW(Phdr)* relro = nullptr;
  bool holds = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD) {
      const uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
      const uintptr_t end = begin + ph.p_memsz;
      if (query.vdso && in(query.vdso, begin, end)) return 0;
      for (unsigned a = 0; a < query.count && !holds; ++a) {
        holds = in(query.addresses[a], begin, end);
      }
    } else if (ph.p_type == PT_GNU_EH_FRAME) {
      eh_frame_hdr = &ph;
    } else if (ph.p_type == PT_DYNAMIC) {
      dynamic = &ph;
    } else if (ph.p_type == PT_GNU_RELRO) {
      relro = &ph;
    }
  }
  if (!holds || !eh_frame_hdr || has_text_relocations(*info, dynamic)) return 0;
  const uintptr_t hdr = info->dlpi_addr + eh_frame_hdr->p_vaddr;
  // The read-only segment that holds .eh_frame_hdr; its file-backed part.
  uintptr_t segment_begin = 0, segment_end = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && in(hdr, begin, begin + ph.p_filesz)) {
      if (ph.p_flags & PF_W) return 0;
      segment_begin = begin;
      segment_end = begin + ph.p_filesz;
    }
  }
  if (!segment_end) return 0;
  uintptr_t first = hdr;
  // .eh_frame_hdr starts: version 1, then how eh_frame_ptr is encoded; the linkers write it as a
  // 4-byte offset from where it lies (DW_EH_PE_pcrel | DW_EH_PE_sdata4).
  const auto* bytes = reinterpret_cast<const unsigned char*>(hdr);
  if (bytes[0] == 1 && bytes[1] == 0x1b) {
    int32_t offset;
    memcpy(&offset, bytes + 4, sizeof offset);
    const uintptr_t eh_frame = hdr + 4 + static_cast<intptr_t>(offset);
    if (in(eh_frame, segment_begin, first)) first = eh_frame;
  }
  // Whole pages only, inside the segment: a page it shares with a neighbour is left mapped.
  const uintptr_t page = static_cast<uintptr_t>(getpagesize());
  uintptr_t low = first & ~(page - 1);
  const uintptr_t segment_first_page = (segment_begin + page - 1) & ~(page - 1);
  if (low < segment_first_page) low = segment_first_page;
  uintptr_t high = segment_end & ~(page - 1);
  if (relro) {
    const uintptr_t relro_begin = info->dlpi_addr + relro->p_vaddr;
    const uintptr_t relro_end = relro_begin + relro->p_memsz;
    if (relro_begin < high && low < relro_end) return 0;
  }
  if (high > low) madvise(reinterpret_cast<void*>(low), high - low, MADV_DONTNEED);
  return 0;
}

}  // namespace

void release_unwind_tables(const uintptr_t* addresses, unsigned count) {
  Query query{addresses, count, getauxval(AT_SYSINFO_EHDR)};
  dl_iterate_phdr(visit, &query);
}

}  // namespace memoplan::shim
