"""Reads R's lazy-load databases (.rdx index + .rdb objects) without R.

R keeps a package's data sets (data/Rdata.rdx, data/Rdata.rdb) as serialized R objects. This
module implements the parts of R's serialization format (R Internals, section 1.8
"Serialization formats"; XDR = big-endian binary) that data sets use, and the lazy-load
containers around it:

  .rdx  4-byte big-endian length + a zlib stream: a serialized list(variables = named list of
        c(offset, length), references = ..., compressed = TRUE | 2 | 3)
  .rdb  at each (offset, length): 4-byte big-endian uncompressed length, then (compressed = 2
        or 3) one byte naming the method -- 'Z' raw LZMA2 (xz, compressed = 3), '2' bzip2,
        '1' zlib, '0' stored -- then the data; compressed = TRUE means zlib without the byte.
        (R's serialize.c, R_decompress1/2/3.) A package's data/Rdata.rdx itself is gzip
        (saveRDS).

R objects become Python values: character vectors -> lists of str (None for NA), integer and
logical vectors -> lists of int (None for NA), double vectors -> lists of float, lists -> RList
(a list with .attrs), symbols -> RSymbol. Attributes are kept in .attrs where a value can carry
them (RList, RVector). Standard library only.
"""
import bz2
import gzip
import lzma
import struct
import zlib

NA_INT = -0x80000000


class RSymbol(str):
    pass


class RVector(list):
    """An atomic vector with its attributes (a dict name -> value)."""

    def __init__(self, items=(), kind=""):
        super().__init__(items)
        self.kind = kind
        self.attrs = {}


class RList(list):
    def __init__(self, items=()):
        super().__init__(items)
        self.attrs = {}

    def names(self):
        return self.attrs.get("names")

    def get(self, name):
        return self[self.names().index(name)]


class RPairList(list):
    """A pairlist (LISTSXP) as a list of (tag, value)."""

    def __init__(self, items=()):
        super().__init__(items)
        self.attrs = {}


class REnvironment:
    def __init__(self):
        self.frame = None
        self.enclos = None
        self.attrs = {}


class ROther:
    """Something a data set does not need (a closure, language object, ...), kept opaque."""

    def __init__(self, sexptype, parts):
        self.sexptype = sexptype
        self.parts = parts
        self.attrs = {}


class Reader:
    def __init__(self, data):
        self.d = data
        self.p = 0
        self.refs = []

    def int(self):
        (v,) = struct.unpack_from(">i", self.d, self.p)
        self.p += 4
        return v

    def bytes(self, n):
        b = self.d[self.p:self.p + n]
        if len(b) != n:
            raise ValueError("R serialization: truncated data")
        self.p += n
        return b

    def length(self):
        n = self.int()
        if n == -1:  # long vector: two more ints
            hi, lo = self.int(), self.int()
            n = (hi << 32) + (lo & 0xFFFFFFFF)
        return n

    def header(self):
        fmt = self.bytes(2)
        if fmt != b"X\n":
            raise ValueError(f"R serialization: only the XDR format is supported, got {fmt!r}")
        version = self.int()
        self.int()  # writer's R version
        self.int()  # minimal reader version
        if version == 3:
            n = self.int()
            self.bytes(n)  # native encoding
        elif version != 2:
            raise ValueError(f"R serialization: unsupported version {version}")

    def charsxp(self, levels):
        n = self.int()
        if n == -1:
            return None
        raw = self.bytes(n)
        if levels & (1 << 2):  # LATIN1
            return raw.decode("latin-1")
        return raw.decode("utf-8", errors="replace")

    def attrs_into(self, obj, has_attr):
        if has_attr:
            pl = self.item()
            a = {}
            for tag, val in (pl if isinstance(pl, RPairList) else []):
                a[tag] = val
            obj.attrs = a
        return obj

    def item(self):
        flags = self.int()
        t = flags & 0xFF
        levels = flags >> 12
        has_attr = bool(flags & (1 << 9))
        has_tag = bool(flags & (1 << 10))
        if t == 254:  # NILVALUE_SXP
            return None
        if t in (242, 241, 253, 252, 251, 250):  # empty/base/global env, unbound, missing, base ns
            return ROther(t, None)
        if t == 255:  # REFSXP
            idx = flags >> 8
            if idx == 0:
                idx = self.int()
            return self.refs[idx - 1]
        if t == 247 or t == 248 or t == 246:  # NAMESPACESXP, PACKAGESXP, PERSISTSXP
            self.int()  # 0
            n = self.int()
            info = [self.item() for _ in range(n)]
            o = ROther(t, info)
            self.refs.append(o)
            return o
        if t == 1:  # SYMSXP
            s = RSymbol(self.item() or "")
            self.refs.append(s)
            return s
        if t == 4:  # ENVSXP
            env = REnvironment()
            self.refs.append(env)
            self.int()  # locked
            env.enclos = self.item()
            env.frame = self.item()
            self.item()  # hashtab
            a = self.item()
            env.attrs = dict(a) if isinstance(a, RPairList) else {}
            return env
        if t in (2, 6, 17, 5, 239, 240):  # LISTSXP, LANGSXP, DOTSXP, PROMSXP, ATTRLANG/ATTRLIST
            items = RPairList()
            attrs = None
            while True:
                if has_attr:
                    attrs = self.item() if attrs is None else (self.item() and attrs)
                tag = self.item() if has_tag else None
                car = self.item()
                items.append((str(tag) if tag is not None else None, car))
                # the cdr: read its flags inline to continue the chain without recursion
                flags = self.int()
                t2 = flags & 0xFF
                if t2 == 254:
                    break
                if t2 not in (2, 6, 17, 5, 239, 240):
                    self.p -= 4
                    rest = self.item()
                    items.append((None, rest))
                    break
                has_attr = bool(flags & (1 << 9))
                has_tag = bool(flags & (1 << 10))
            if isinstance(attrs, RPairList):
                items.attrs = dict(attrs)
            if t != 2:
                o = ROther(t, items)
                return o
            return items
        if t == 9:  # CHARSXP
            return self.charsxp(levels)
        if t in (10, 13):  # LGLSXP, INTSXP
            n = self.length()
            vals = struct.unpack_from(f">{n}i", self.d, self.p)
            self.p += 4 * n
            v = RVector([None if x == NA_INT else x for x in vals], "logical" if t == 10 else "integer")
            return self.attrs_into(v, has_attr)
        if t == 14:  # REALSXP
            n = self.length()
            vals = struct.unpack_from(f">{n}d", self.d, self.p)
            self.p += 8 * n
            return self.attrs_into(RVector(vals, "double"), has_attr)
        if t == 15:  # CPLXSXP
            n = self.length()
            vals = struct.unpack_from(f">{2 * n}d", self.d, self.p)
            self.p += 16 * n
            return self.attrs_into(RVector(vals, "complex"), has_attr)
        if t == 16:  # STRSXP
            n = self.length()
            out = RVector([], "character")
            for _ in range(n):
                f = self.int()
                if f & 0xFF != 9:
                    raise ValueError("R serialization: STRSXP element is not a CHARSXP")
                out.append(self.charsxp(f >> 12))
            return self.attrs_into(out, has_attr)
        if t in (19, 20):  # VECSXP, EXPRSXP
            n = self.length()
            out = RList(self.item() for _ in range(n))
            return self.attrs_into(out, has_attr)
        if t == 24:  # RAWSXP
            n = self.length()
            return self.attrs_into(RVector(self.bytes(n), "raw"), has_attr)
        if t == 238:  # ALTREP_SXP: info (class, package, type), state, attributes
            info = self.item()
            state = self.item()
            attr = self.item()
            cls = str(info[0][1]) if isinstance(info, RPairList) and info else ""
            v = self.altrep(cls, state)
            if isinstance(attr, RPairList) and hasattr(v, "attrs"):
                v.attrs = dict(attr)
            return v
        if t in (3, 25):  # CLOSXP, S4SXP / OBJSXP
            parts = []
            if has_attr:
                parts.append(self.item())
            if t == 3:
                parts += [self.item(), self.item(), self.item()]  # env, formals, body
            return ROther(t, parts)
        raise ValueError(f"R serialization: SEXP type {t} not supported")

    def altrep(self, cls, state):
        if cls in ("compact_intseq", "compact_realseq"):
            n, start, incr = (state if len(state) == 3 else list(state)[:3])
            n = int(n)
            vals = [start + i * incr for i in range(n)]
            if cls == "compact_intseq":
                vals = [int(x) for x in vals]
            return RVector(vals, "integer" if cls == "compact_intseq" else "double")
        if cls.startswith("wrap_"):  # state = list(payload, metadata)
            return state[0][1] if isinstance(state, RPairList) else state[0]
        if cls == "deferred_string":  # state = pairlist(original vector, ...)
            orig = state[0][1] if isinstance(state, RPairList) else state
            return RVector([None if x is None else (str(int(x)) if float(x).is_integer() else repr(x)) for x in orig],
                           "character")
        raise ValueError(f"R serialization: ALTREP class {cls!r} not supported")


def unserialize(data):
    r = Reader(data)
    r.header()
    return r.item()


def decompress(blob, method):
    """One lazy-load record: 4-byte big-endian length, [method byte], payload."""
    (n,) = struct.unpack_from(">I", blob, 0)
    if method is True or method == 1:
        out = zlib.decompress(blob[4:])
    else:
        kind = blob[4:5]
        body = blob[5:]
        if kind == b"Z" and method == 3:  # R_compress3: raw LZMA2 stream (xz filter, preset 9e)
            dec = lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[
                {"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}])
            out = dec.decompress(body)
        elif kind == b"2":
            out = bz2.decompress(body)
        elif kind == b"1":
            out = zlib.decompress(body)
        elif kind == b"0":
            out = body
        else:
            raise ValueError(f"lazy-load record: unknown compression {kind!r} (compressed = {method})")
    if len(out) != n:
        raise ValueError(f"lazy-load record: expected {n} bytes, got {len(out)}")
    return out


def lazyload(rdx_path):
    """The objects of a lazy-load database: {name: value}. rdx_path ends in .rdx; the .rdb
    next to it holds the data."""
    with open(rdx_path, "rb") as f:
        raw = f.read()
    # Packages' data/Rdata.rdx is written by saveRDS (gzip); R/<pkg>.rdx by makeLazyLoadDB
    # (4-byte length + zlib).
    index = unserialize(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else decompress(raw, True))
    comp = index.get("compressed")
    comp = comp[0] if isinstance(comp, list) else comp
    method = True if comp in (True, 1) else int(comp)
    variables = index.get("variables")
    with open(rdx_path[:-4] + ".rdb", "rb") as f:
        rdb = f.read()
    out = {}
    for name, (off, ln) in zip(variables.names(), variables):
        out[name] = unserialize(decompress(rdb[int(off):int(off) + int(ln)], method))
    return out


def data_frame(obj):
    """A data.frame (an RList with names) as {column: list}; factors become their labels."""
    cols = {}
    for name, col in zip(obj.names(), obj):
        levels = getattr(col, "attrs", {}).get("levels")
        if levels is not None:
            col = [None if x is None else levels[x - 1] for x in col]
        cols[name] = list(col)
    return cols
