/* Internal to the trainer: the text its messages and logs are made of. */
#ifndef DFT_TRAIN_TEXT_H
#define DFT_TRAIN_TEXT_H

#include <stddef.h>

/* printf into a caller's message buffer; a NULL buffer or zero length is a no-op. */
void dft_train_msg(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Integers as integers, anything else in the shortest decimal form that reads back as the same
   double: "128" or "0.0003" rather than "1.3e+02" or a 17-digit tail, and two different values
   never print alike. NaN prints as "nan". */
void dft_format_shortest(char *buf, size_t len, double x);

#endif
