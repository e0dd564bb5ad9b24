/* Checkpoint files (layout in checkpoint.h). Saving streams the file through a small
 * buffer while hashing it (train/outfile.h: a temporary file, renamed); loading reads the
 * header, checks that the file is as long as the header says, reads the whole file, checks
 * it completely and only then decodes into the caller's sections, so a refused file changes
 * nothing. */
#include "train/checkpoint.h"
#include "train/outfile.h"
#include "train/text.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char ckpt_magic[8] = {'D', 'F', 'A', 'C', 'K', 'P', 'T', '\n'};

/* Bytes of one configuration field before its name and after it, and of the
   step/nfloats/nsections block and the checksum: the layout's fixed parts. */
enum { FIELD_FIXED = 1 + 8, TAIL_BLOCK = 8 + 8 + 4, CHECKSUM_BYTES = 8 };

static uint64_t fnv1a64(uint64_t h, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define FNV_OFFSET_BASIS 0xcbf29ce484222325ull

uint64_t dft_ckpt_checksum(const void *bytes, size_t n) { return fnv1a64(FNV_OFFSET_BASIS, bytes, n); }

static void put_u32(uint8_t *b, uint32_t x) {
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(x >> (8 * i));
}
static void put_u64(uint8_t *b, uint64_t x) {
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(x >> (8 * i));
}
static uint32_t get_u32(const uint8_t *b) {
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) x |= (uint32_t)b[i] << (8 * i);
    return x;
}
static uint64_t get_u64(const uint8_t *b) {
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) x |= (uint64_t)b[i] << (8 * i);
    return x;
}
static uint64_t f64_bits(double x) {
    uint64_t u;
    memcpy(&u, &x, 8);
    return u;
}
static double bits_f64(uint64_t u) {
    double x;
    memcpy(&x, &u, 8);
    return x;
}

/* Checks the arguments both directions share; the message names the path. */
static int check_args(const char *path, const dft_ckpt_field *fields, int nfields, float *const *sections,
                      int nsections, size_t nfloats, char *err, size_t errlen) {
    if (!path) {
        dft_train_msg(err, errlen, "checkpoint: path is NULL");
        return -1;
    }
    if (nfields < 0 || (nfields > 0 && !fields)) {
        dft_train_msg(err, errlen, "checkpoint %s: invalid field list (%d fields)", path, nfields);
        return -1;
    }
    for (int i = 0; i < nfields; i++) {
        if (!fields[i].name || strlen(fields[i].name) > 255) {
            dft_train_msg(err, errlen, "checkpoint %s: field %d has %s name", path, i,
                           fields[i].name ? "a longer than 255-byte" : "no");
            return -1;
        }
    }
    if (nsections < 0 || nsections > DFT_CKPT_MAX_SECTIONS || (nsections > 0 && !sections)) {
        dft_train_msg(err, errlen, "checkpoint %s: %d sections (at most %d)", path, nsections, DFT_CKPT_MAX_SECTIONS);
        return -1;
    }
    for (int s = 0; s < nsections; s++) {
        if (!sections[s] && nfloats > 0) {
            dft_train_msg(err, errlen, "checkpoint %s: section %d is NULL", path, s);
            return -1;
        }
    }
    if (nfloats > (SIZE_MAX / 4) / DFT_CKPT_MAX_SECTIONS) {
        dft_train_msg(err, errlen, "checkpoint %s: %zu floats per section is too many", path, nfloats);
        return -1;
    }
    return 0;
}

/* ---- saving ---- */

typedef struct {
    FILE *f;
    uint64_t hash;
    int failed; /* errno of the first failed write, or -1 when it set none */
} writer;

static void emit(writer *w, const void *p, size_t n) {
    if (w->failed || n == 0) return;
    w->hash = fnv1a64(w->hash, p, n);
    errno = 0;
    if (fwrite(p, 1, n, w->f) != n) w->failed = errno ? errno : -1;
}

static void write_sections(writer *w, float *const *sections, int nsections, size_t nfloats) {
    enum { CHUNK = 4096 };
    uint8_t buf[CHUNK * 4];
    for (int s = 0; s < nsections; s++) {
        for (size_t i = 0; i < nfloats; i += CHUNK) {
            size_t k = nfloats - i < CHUNK ? nfloats - i : CHUNK;
            for (size_t j = 0; j < k; j++) {
                uint32_t u;
                memcpy(&u, &sections[s][i + j], 4);
                put_u32(buf + 4 * j, u);
            }
            emit(w, buf, 4 * k);
        }
    }
}

int dft_ckpt_save(const char *path, const dft_ckpt_field *fields, int nfields, int64_t step,
                   float *const *sections, int nsections, size_t nfloats, char *err, size_t errlen) {
    if (check_args(path, fields, nfields, sections, nsections, nfloats, err, errlen)) return -1;
    if (nfields > DFT_CKPT_MAX_FIELDS) {
        dft_train_msg(err, errlen, "checkpoint %s: %d configuration fields (at most %d)", path, nfields,
                      DFT_CKPT_MAX_FIELDS);
        return -1;
    }
    dft_outfile out;
    if (dft_outfile_open(&out, path, "checkpoint", err, errlen)) return -1;
    writer w = {out.f, FNV_OFFSET_BASIS, 0};
    uint8_t b[8];
    emit(&w, ckpt_magic, sizeof ckpt_magic);
    put_u32(b, DFT_CKPT_VERSION);
    emit(&w, b, 4);
    put_u32(b, (uint32_t)nfields);
    emit(&w, b, 4);
    for (int i = 0; i < nfields; i++) {
        uint8_t len = (uint8_t)strlen(fields[i].name);
        emit(&w, &len, 1);
        emit(&w, fields[i].name, len);
        put_u64(b, f64_bits(fields[i].value));
        emit(&w, b, 8);
    }
    put_u64(b, (uint64_t)step);
    emit(&w, b, 8);
    put_u64(b, (uint64_t)nfloats);
    emit(&w, b, 8);
    put_u32(b, (uint32_t)nsections);
    emit(&w, b, 4);
    write_sections(&w, sections, nsections, nfloats);
    uint64_t sum = w.hash;
    put_u64(b, sum);
    emit(&w, b, 8);
    return dft_outfile_commit(&out, w.failed, "checkpoint", err, errlen);
}

/* ---- loading ---- */

/* The longest header a file may have: magic, version and count, DFT_CKPT_MAX_FIELDS fields
   of the longest name, the step/nfloats/nsections block. */
#define HEADER_MAX (8 + 8 + (size_t)DFT_CKPT_MAX_FIELDS * (FIELD_FIXED + 255) + TAIL_BLOCK)

/* Where the parts of a structurally sound file lie; filled by parse_layout. */
typedef struct {
    uint32_t nfields;
    size_t fields_at; /* offset of the first field */
    int64_t step;
    uint64_t nfloats;
    uint32_t nsections;
    size_t data_at; /* offset of the first section */
} layout;

/* Checks the magic, the version and that every length in the header fits the file. */
static int parse_layout(const char *path, const uint8_t *buf, size_t len, layout *lo, char *err, size_t errlen) {
    if (len < sizeof ckpt_magic) {
        if (len == 0)
            dft_train_msg(err, errlen, "checkpoint %s: empty file (truncated)", path);
        else if (memcmp(buf, ckpt_magic, len) == 0)
            dft_train_msg(err, errlen, "checkpoint %s: truncated (%zu bytes)", path, len);
        else
            dft_train_msg(err, errlen, "checkpoint %s: not a distflash checkpoint", path);
        return -1;
    }
    if (memcmp(buf, ckpt_magic, sizeof ckpt_magic) != 0) {
        dft_train_msg(err, errlen, "checkpoint %s: not a distflash checkpoint", path);
        return -1;
    }
    size_t pos = sizeof ckpt_magic;
    if (len - pos < 8) {
        dft_train_msg(err, errlen, "checkpoint %s: truncated (%zu bytes, inside the header)", path, len);
        return -1;
    }
    uint32_t version = get_u32(buf + pos);
    if (version != DFT_CKPT_VERSION) {
        dft_train_msg(err, errlen, "checkpoint %s: format version %u, this build reads %u", path, version,
                       DFT_CKPT_VERSION);
        return -1;
    }
    lo->nfields = get_u32(buf + pos + 4);
    pos += 8;
    if (lo->nfields > DFT_CKPT_MAX_FIELDS) {
        dft_train_msg(err, errlen, "checkpoint %s: %u configuration fields, more than any checkpoint has (%d; file corrupt)",
                      path, lo->nfields, DFT_CKPT_MAX_FIELDS);
        return -1;
    }
    lo->fields_at = pos;
    for (uint32_t i = 0; i < lo->nfields; i++) {
        if (len - pos < 1 || len - pos - 1 < (size_t)buf[pos] + 8) {
            dft_train_msg(err, errlen, "checkpoint %s: truncated (%zu bytes, inside configuration field %u)", path,
                           len, i);
            return -1;
        }
        pos += FIELD_FIXED + buf[pos];
    }
    if (len - pos < TAIL_BLOCK) {
        dft_train_msg(err, errlen, "checkpoint %s: truncated (%zu bytes, inside the header)", path, len);
        return -1;
    }
    lo->step = (int64_t)get_u64(buf + pos);
    lo->nfloats = get_u64(buf + pos + 8);
    lo->nsections = get_u32(buf + pos + 16);
    pos += TAIL_BLOCK;
    lo->data_at = pos;
    size_t room = len - pos; /* what the sections and the checksum must fill exactly */
    uint64_t data_bytes = 0;
    int too_big = lo->nsections > 0 && lo->nfloats > ((uint64_t)room / 4) / lo->nsections;
    if (!too_big) data_bytes = lo->nfloats * 4 * lo->nsections;
    if (too_big || room < data_bytes + CHECKSUM_BYTES) {
        dft_train_msg(err, errlen,
                       "checkpoint %s: truncated (%zu bytes; the header describes %u sections of %llu floats)", path,
                       len, lo->nsections, (unsigned long long)lo->nfloats);
        return -1;
    }
    if (room > data_bytes + CHECKSUM_BYTES) {
        dft_train_msg(err, errlen, "checkpoint %s: %llu bytes past the end of the data (file corrupt)", path,
                       (unsigned long long)(room - data_bytes - CHECKSUM_BYTES));
        return -1;
    }
    return 0;
}

/* Reads a checkpoint whose layout fits its size: the file must be a regular file, its header
   is read first (at most HEADER_MAX bytes) and checked against the file's size, and only
   then is the whole file read. Returns the bytes (malloc'd), with *len and *lo; NULL with a
   message on failure. Bounded by the file: a device or a pipe is refused, not read. */
static uint8_t *read_checked(const char *path, size_t *len, layout *lo, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        dft_train_msg(err, errlen, "checkpoint %s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        dft_train_msg(err, errlen, "checkpoint %s: not a regular file (a checkpoint is read whole, by its size)", path);
        fclose(f);
        return NULL;
    }
    if ((uint64_t)st.st_size > SIZE_MAX - 1) {
        dft_train_msg(err, errlen, "checkpoint %s: %lld bytes is too large", path, (long long)st.st_size);
        fclose(f);
        return NULL;
    }
    const size_t size = (size_t)st.st_size, head = size < HEADER_MAX ? size : HEADER_MAX;
    uint8_t *buf = malloc(head ? head : 1);
    if (!buf) {
        dft_train_msg(err, errlen, "checkpoint %s: out of memory", path);
        fclose(f);
        return NULL;
    }
    size_t got = fread(buf, 1, head, f);
    /* the layout as the header describes it, against the file's size: a header that does not
       fit is refused before the data is read (parse_layout reads only the header's bytes) */
    if (got == head && parse_layout(path, buf, size, lo, err, errlen)) {
        free(buf);
        fclose(f);
        return NULL;
    }
    if (got == head && size > head) {
        uint8_t *all = realloc(buf, size);
        if (!all) {
            free(buf);
            fclose(f);
            dft_train_msg(err, errlen, "checkpoint %s: out of memory for %zu bytes", path, size);
            return NULL;
        }
        buf = all;
        got += fread(buf + head, 1, size - head, f);
    }
    const int more = got == size && fgetc(f) != EOF, failed = ferror(f);
    const int saved = errno;
    fclose(f);
    if (got != size || more || failed) {
        free(buf);
        if (failed) dft_train_msg(err, errlen, "checkpoint %s: read failed: %s", path, strerror(saved));
        else dft_train_msg(err, errlen, "checkpoint %s: changed while being read (%zu bytes, then %s)", path, size,
                           more ? "more" : "fewer");
        return NULL;
    }
    *len = size;
    return buf;
}

/* A field name read from the file, fit for a one-line message: the file is untrusted, so a
   byte outside printable ASCII (a NUL, a line break, a terminal escape) and the backslash
   show as \xNN. out holds at least 4 * 255 + 1 bytes. */
enum { NAME_TEXT_MAX = 4 * 255 + 1 };
static const char *name_text(char out[NAME_TEXT_MAX], const uint8_t *name, size_t n) {
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = name[i];
        if (c >= 0x20 && c <= 0x7e && c != '\\') {
            out[o++] = (char)c;
        } else {
            out[o++] = '\\', out[o++] = 'x', out[o++] = hex[c >> 4], out[o++] = hex[c & 15];
        }
    }
    out[o] = '\0';
    return out;
}

/* The file's configuration against this run's: same names, same order, same values. */
static int compare_fields(const char *path, const uint8_t *buf, const layout *lo, const dft_ckpt_field *fields,
                          int nfields, char *err, size_t errlen) {
    size_t pos = lo->fields_at;
    uint32_t common = lo->nfields < (uint32_t)nfields ? lo->nfields : (uint32_t)nfields;
    for (uint32_t i = 0; i < common; i++) {
        size_t nlen = buf[pos];
        const char *name = (const char *)buf + pos + 1;
        double value = bits_f64(get_u64(buf + pos + 1 + nlen));
        pos += FIELD_FIXED + nlen;
        if (nlen != strlen(fields[i].name) || memcmp(name, fields[i].name, nlen) != 0) {
            char text[NAME_TEXT_MAX];
            dft_train_msg(err, errlen, "checkpoint %s: configuration field %u is '%s' in the file but '%s' in this run",
                           path, i, name_text(text, (const uint8_t *)name, nlen), fields[i].name);
            return -1;
        }
        /* bit equality also accepts a NaN saved and compared as itself */
        if (!(value == fields[i].value) && f64_bits(value) != f64_bits(fields[i].value)) {
            char in_file[40], in_run[40];
            dft_format_shortest(in_file, sizeof in_file, value);
            dft_format_shortest(in_run, sizeof in_run, fields[i].value);
            dft_train_msg(err, errlen, "checkpoint %s: %s is %s in the file but %s in this run", path, fields[i].name,
                           in_file, in_run);
            return -1;
        }
    }
    if (lo->nfields > common) {
        char text[NAME_TEXT_MAX];
        dft_train_msg(
            err, errlen,
            "checkpoint %s: the file has %u configuration fields but this run has %d (first extra in the file: "
            "'%s')",
            path, lo->nfields, nfields, name_text(text, buf + pos + 1, buf[pos]));
        return -1;
    }
    if ((uint32_t)nfields > common) {
        dft_train_msg(
            err, errlen,
            "checkpoint %s: the file has %u configuration fields but this run has %d (first missing from the "
            "file: '%s')",
            path, lo->nfields, nfields, fields[common].name);
        return -1;
    }
    return 0;
}

int dft_ckpt_load(const char *path, const dft_ckpt_field *fields, int nfields, int64_t *step,
                   float *const *sections, int nsections, size_t nfloats, char *err, size_t errlen) {
    if (check_args(path, fields, nfields, sections, nsections, nfloats, err, errlen)) return -1;
    if (!step) {
        dft_train_msg(err, errlen, "checkpoint %s: step is NULL", path);
        return -1;
    }
    size_t len = 0;
    layout lo;
    uint8_t *buf = read_checked(path, &len, &lo, err, errlen);
    if (!buf) return -1;

    int rc = -1;
    /* The checksum comes before any comparison so a corrupt byte is reported as corruption,
       not as a configuration that seems to differ. */
    if (dft_ckpt_checksum(buf, len - CHECKSUM_BYTES) != get_u64(buf + len - CHECKSUM_BYTES)) {
        dft_train_msg(err, errlen, "checkpoint %s: checksum mismatch (file corrupt)", path);
        goto done;
    }
    if (compare_fields(path, buf, &lo, fields, nfields, err, errlen)) goto done;
    if (lo.step < 0) {
        dft_train_msg(err, errlen, "checkpoint %s: step %lld in the file is negative", path, (long long)lo.step);
        goto done;
    }
    if (lo.nsections != (uint32_t)nsections) {
        dft_train_msg(err, errlen, "checkpoint %s: the file has %u sections but this run expects %d", path,
                       lo.nsections, nsections);
        goto done;
    }
    if (lo.nfloats != (uint64_t)nfloats) {
        dft_train_msg(err, errlen, "checkpoint %s: the file holds %llu floats per section but this run has %zu", path,
                       (unsigned long long)lo.nfloats, nfloats);
        goto done;
    }
    for (int s = 0; s < nsections; s++) {
        const uint8_t *src = buf + lo.data_at + (size_t)s * nfloats * 4;
        for (size_t i = 0; i < nfloats; i++) {
            uint32_t u = get_u32(src + 4 * i);
            memcpy(&sections[s][i], &u, 4);
        }
    }
    *step = lo.step;
    rc = 0;
done:
    free(buf);
    return rc;
}

int dft_ckpt_read_any(const char *path, dft_ckpt_named *fields, int max_fields, int *nfields, int64_t *step,
                      size_t *nfloats, float **section0, char *err, size_t errlen) {
    if (!path || !nfields || !step || !nfloats || !section0 || max_fields < 0 || (max_fields > 0 && !fields)) {
        dft_train_msg(err, errlen, "checkpoint %s: invalid arguments", path ? path : "(null)");
        return -1;
    }
    size_t len = 0;
    layout lo;
    uint8_t *buf = read_checked(path, &len, &lo, err, errlen);
    if (!buf) return -1;
    int rc = -1;
    if (dft_ckpt_checksum(buf, len - CHECKSUM_BYTES) != get_u64(buf + len - CHECKSUM_BYTES)) {
        dft_train_msg(err, errlen, "checkpoint %s: checksum mismatch (file corrupt)", path);
        goto done;
    }
    if (lo.nsections < 1 || lo.nfloats == 0 || lo.nfloats > SIZE_MAX / 4) {
        dft_train_msg(err, errlen, "checkpoint %s: holds no parameters (%u sections of %llu floats)", path, lo.nsections,
                       (unsigned long long)lo.nfloats);
        goto done;
    }
    float *p = malloc(sizeof(float) * (size_t)lo.nfloats);
    if (!p) {
        dft_train_msg(err, errlen, "checkpoint %s: out of memory for %llu floats", path, (unsigned long long)lo.nfloats);
        goto done;
    }
    size_t pos = lo.fields_at;
    for (uint32_t i = 0; i < lo.nfields; i++) {
        size_t nlen = buf[pos];
        if ((int64_t)i < max_fields) {
            memcpy(fields[i].name, buf + pos + 1, nlen);
            fields[i].name[nlen] = '\0';
            fields[i].value = bits_f64(get_u64(buf + pos + 1 + nlen));
        }
        pos += FIELD_FIXED + nlen;
    }
    for (size_t i = 0; i < lo.nfloats; i++) {
        uint32_t u = get_u32(buf + lo.data_at + 4 * i);
        memcpy(&p[i], &u, 4);
    }
    *nfields = (int)(lo.nfields > INT32_MAX ? INT32_MAX : lo.nfields);
    *step = lo.step;
    *nfloats = (size_t)lo.nfloats;
    *section0 = p;
    rc = 0;
done:
    free(buf);
    return rc;
}
