/* Checkpoint files: a versioned binary file with a checksum. A file that is corrupt,
 * truncated, of another format version, or written for another configuration is
 * refused with a message that says which (and which field differs).
 *
 * Layout (little-endian), version 1:
 *   "DFACKPT\n"  u32 version  u32 nfields
 *   nfields x { u8 name_len, name bytes, f64 value }     -- the configuration
 *   i64 step     u64 nfloats  u32 nsections
 *   nsections x { nfloats f32 }                           -- params, adam m, adam v
 *   u64 checksum (FNV-1a 64 of every byte before it)
 * Files are written under a fresh temporary name beside the target and renamed
 * (train/outfile.h), so a crash never leaves half a file and nothing planted at a
 * predictable name is followed. Readers take regular files only, and read the data only
 * once the header's sizes match the file's. */
#ifndef DFT_TRAIN_CHECKPOINT_H
#define DFT_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#define DFT_CKPT_VERSION 1u
#define DFT_CKPT_MAX_SECTIONS 4
#define DFT_CKPT_MAX_FIELDS 1024 /* configuration fields a file may hold (refused above, as corrupt) */

/* A configuration value that must match for a resume (model shape, seed, schedule...). */
typedef struct {
    const char *name; /* at most 255 bytes */
    double value;     /* integers are exact up to 2^53 */
} dft_ckpt_field;

/* Saves; returns 0, or -1 with the reason in err (cannot open, write failed, disk full). */
int dft_ckpt_save(const char *path, const dft_ckpt_field *fields, int nfields, int64_t step,
                   float *const *sections, int nsections, size_t nfloats, char *err, size_t errlen);

/* Loads into the caller's sections (each nfloats floats) after checking the magic, the
   version, the checksum, the fields (same names, same order, same values) and the sizes.
   On any failure returns -1 with a message and leaves the sections untouched. */
int dft_ckpt_load(const char *path, const dft_ckpt_field *fields, int nfields, int64_t *step,
                   float *const *sections, int nsections, size_t nfloats, char *err, size_t errlen);

/* A configuration field as read from a file. */
typedef struct {
    char name[256];
    double value;
} dft_ckpt_named;

/* Reads a checkpoint without knowing its configuration (for `distflash export`): checks the
   magic, the version, the layout and the checksum, returns up to max_fields fields in file
   order (*nfields gets how many the file has), the step, the floats per section and a malloc'd
   copy of section 0 (the parameters; the caller frees it). -1 with a message on any failure. */
int dft_ckpt_read_any(const char *path, dft_ckpt_named *fields, int max_fields, int *nfields, int64_t *step,
                      size_t *nfloats, float **section0, char *err, size_t errlen);

/* The checksum of a file's first n bytes, as the last 8 bytes of a file hold it (little-endian):
   FNV-1a 64. For tools and tests that build or repair files byte by byte. */
uint64_t dft_ckpt_checksum(const void *bytes, size_t n);

#endif
