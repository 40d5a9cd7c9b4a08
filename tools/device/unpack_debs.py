#!/usr/bin/env python3
"""What `dpkg -x DEB DEST` does, for machines without dpkg: extracts the data
archive of each Debian package into DEST (never /). A .deb is an `ar`
archive whose member data.tar.{xz,gz,bz2} holds the files.

  unpack_debs.py DEST DEB...
"""
import io
import os
import sys
import tarfile


def ar_members(path):
    """(name, bytes) of each member of an ar archive."""
    with open(path, "rb") as f:
        if f.read(8) != b"!<arch>\n":
            raise ValueError("%s: not an ar archive" % path)
        while True:
            header = f.read(60)
            if len(header) < 60:
                return
            if header[58:60] != b"`\n":
                raise ValueError("%s: bad ar member header" % path)
            name = header[:16].decode().strip().rstrip("/")
            size = int(header[48:58].decode().strip())
            data = f.read(size)
            if size % 2:
                f.read(1)
            yield name, data


def unpack(deb, dest):
    for name, data in ar_members(deb):
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:  # xz, gz, bz2 by content
                if hasattr(tarfile, "fully_trusted_filter"):  # Python >= 3.12: say so explicitly
                    tar.extractall(dest, filter="fully_trusted")
                else:
                    tar.extractall(dest)
            return
    raise ValueError("%s: no data.tar member" % deb)


def main():
    if len(sys.argv) < 3 or os.path.abspath(sys.argv[1]) == "/":
        sys.exit("usage: unpack_debs.py DEST DEB... (DEST not /)")
    os.makedirs(sys.argv[1], exist_ok=True)
    for deb in sys.argv[2:]:
        unpack(deb, sys.argv[1])


if __name__ == "__main__":
    main()
