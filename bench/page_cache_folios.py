"""The two page-cache facts docs/BUDGET.md builds the weight file on, measured on this kernel.

1. A file written through the page cache and touched through a MADV_RANDOM + MADV_NOHUGEPAGE
   mapping maps a whole large folio (prints the pages one touched byte mapped); evicted first, a
   touch maps a page (plus the kernel's fault-around).
2. Populating 256 MiB of a cold file through such a mapping: without read-ahead, with one
   POSIX_FADV_WILLNEED for the whole range, and in 1 MiB WILLNEED requests (prints seconds).

    /usr/bin/python3 bench/page_cache_folios.py [DIR]     # DIR on the weights' file system
"""
import mmap
import os
import struct
import sys
import time

MADV_POPULATE_READ = 22


def resident_pages(path):
    with open("/proc/self/maps") as f:
        for line in f:
            if path in line:
                begin, end = [int(x, 16) for x in line.split()[0].split("-")]
    with open("/proc/self/pagemap", "rb") as pm:
        pm.seek(begin // 4096 * 8)
        entries = pm.read((end - begin) // 4096 * 8)
    return sum((struct.unpack_from("Q", entries, i * 8)[0] >> 63) & 1
               for i in range((end - begin) // 4096))


def mapped(path, size):
    fd = os.open(path, os.O_RDONLY)
    m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
    m.madvise(mmap.MADV_RANDOM)
    m.madvise(mmap.MADV_NOHUGEPAGE)
    return fd, m


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
    path = os.path.join(directory, "memoplan_folios.bin")
    size = 256 << 20
    with open(path, "wb") as f:
        f.write(os.urandom(size))
        f.flush()
        os.fsync(f.fileno())
    for evict in (False, True):
        fd, m = mapped(path, size)
        if evict:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        m[1 << 20]
        print("%s: one touched byte mapped %d pages" % (
            "evicted first" if evict else "as written", resident_pages(path)))
        m.close()
        os.close(fd)
    fd, m = mapped(path, size)
    for name, chunk in (("no read-ahead", 0), ("one WILLNEED", size), ("1 MiB WILLNEEDs", 1 << 20)):
        m.madvise(mmap.MADV_DONTNEED)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        start = time.time()
        for at in range(0, size, chunk or size):
            if chunk:
                os.posix_fadvise(fd, at, chunk, os.POSIX_FADV_WILLNEED)
        m.madvise(MADV_POPULATE_READ, 0, size)
        print("%s: 256 MiB cold in %.3f s" % (name, time.time() - start))
    m.close()
    os.close(fd)
    os.unlink(path)


if __name__ == "__main__":
    main()
