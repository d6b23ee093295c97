/* crc32c.h — CRC-32C (Castagnoli), the checksum of every tensor tfm writes.
 *
 * CRC-32C is the remainder of the message, read as a polynomial over GF(2),
 * divided by 0x1EDC6F41 (bit-reflected: 0x82F63B78), with the register
 * started at and finally XORed with 0xFFFFFFFF (iSCSI, ext4, Btrfs use it).
 * It detects every error of up to 3 bits in messages up to ~2^31 bits and
 * every burst of up to 32 bits, so a flipped exponent bit in a weight cannot
 * pass. x86 has an instruction for it (SSE4.2 crc32, 8 bytes per instruction);
 * crc32c() uses it when the CPU has it (cpu_has(CPU_SSE4_2), at run time) and tables (slicing by 8)
 * otherwise, with the same result. Known answer: crc32c("123456789") = 0xE3069283.
 */
#ifndef TFM_CRC32C_H
#define TFM_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of data[0..n) continued from `crc` (0 for a new message):
 * crc32c(crc32c(0, a, na), b, nb) == crc32c(0, a ++ b, na + nb). */
uint32_t crc32c(uint32_t crc, const void *data, size_t n);
/* The CRC-32C of a ++ b from crc_a = crc32c(0, a, |a|), crc_b = crc32c(0, b,
 * |b|) and len_b = |b| bytes, without the bytes: so the pieces of a message
 * read apart (each rank its slice of the Adam moments) are checked against
 * the whole's checksum. O(log len_b). */
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
/* The same by table only (for the tests: the two must agree). */
uint32_t crc32c_table(uint32_t crc, const void *data, size_t n);
/* 1 if crc32c() uses the SSE4.2 instruction on this CPU. */
int crc32c_hardware(void);

#endif
