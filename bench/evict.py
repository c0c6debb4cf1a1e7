"""Drop files from the page cache (posix_fadvise DONTNEED): a cold read next.
   python3 bench/evict.py FILE..."""
import os
import sys

for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
