/* crc32c.c — CRC-32C by the SSE4.2 instruction or by table (see crc32c.h). */
#include "crc32c.h"
#include "cpu.h"

#include <string.h>

#define POLY 0x82F63B78u   /* 0x1EDC6F41 bit-reflected */

/* table[b] = the CRC register after shifting the byte b through it;
 * slice[k][b] = the same followed by k zero bytes ("slicing by 8": eight
 * bytes a step, each through its own table, XORed together). */
static uint32_t slice[8][256];
#define table slice[0]

static void table_init(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t r = b;
        for (int k = 0; k < 8; k++) r = r & 1 ? (r >> 1) ^ POLY : r >> 1;
        table[b] = r;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++) slice[k][b] = (slice[k - 1][b] >> 8) ^ table[slice[k - 1][b] & 0xFF];
}

uint32_t crc32c_table(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    uint32_t r = ~crc;
    for (; n >= 8; n -= 8, p += 8) {   /* the register meets the first 4 bytes; the next 4 pass on */
        uint32_t lo = r ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        r = slice[7][lo & 0xFF] ^ slice[6][(lo >> 8) & 0xFF] ^ slice[5][(lo >> 16) & 0xFF] ^ slice[4][lo >> 24] ^
            slice[3][p[4]] ^ slice[2][p[5]] ^ slice[1][p[6]] ^ slice[0][p[7]];
    }
    while (n--) r = table[(r ^ *p++) & 0xFF] ^ (r >> 8);
    return ~r;
}

/* Joining two CRCs. The register is linear over GF(2): continuing from c
 * over b, crc32c(c, b) = Z(c) ^ crc32c(0, b), where Z advances a register
 * over |b| zero bytes (the initial and final inversions cancel: Z(~c) ^
 * Z(~0) = Z(c)). One zero bit multiplies the register by x modulo P (in the
 * reflected order, bit 31 holds x^0), so Z(c) = c * x^(8|b|) mod P, with
 * x^(8|b|) = (x^8)^|b| by repeated squaring. */
static uint32_t mul_mod_p(uint32_t a, uint32_t b) {   /* a * b mod P, reflected */
    uint32_t prod = 0;
    for (uint32_t bit = 1u << 31; bit; bit >>= 1) {   /* a's x^0, x^1, ... */
        if (a & bit) prod ^= b;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;         /* b *= x */
    }
    return prod;
}

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
    uint32_t shift = 1u << 31, x8 = 1u << 23;   /* x^0 = 1; x^8 (bit 31 - 8) */
    for (uint64_t e = len_b; e; e >>= 1) {       /* x^(8 len_b) = (x^8)^len_b, by squaring */
        if (e & 1) shift = mul_mod_p(shift, x8);
        x8 = mul_mod_p(x8, x8);
    }
    return mul_mod_p(crc_a, shift) ^ crc_b;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>

/* Three independent streams over three thirds of a block: the crc32
 * instruction takes 3 cycles but starts one per cycle, so one stream runs at
 * a third of its speed. The three remainders are joined by shifting the first
 * two past the bytes that follow them: shifting a CRC register by L zero
 * bytes is multiplying it by x^(8L) mod P, a linear map, precomputed as a
 * 4 x 256 table per block length (shift_table). */
#define BLOCK 4096   /* bytes per stream */

/* shift[k][b]: the register (b << 8k) advanced over BLOCK zero bytes; the
 * map is linear, so any register is the XOR over its four bytes, and each
 * table entry the XOR over the bits of b of the 32 single-bit images. */
static uint32_t shift[4][256];

static void shift_init(void) {
    uint32_t bit[32];
    for (int j = 0; j < 32; j++) {
        uint32_t r = 1u << j;
        for (int i = 0; i < BLOCK; i++) r = table[r & 0xFF] ^ (r >> 8);   /* one zero byte */
        bit[j] = r;
    }
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t r = 0;
            for (int j = 0; j < 8; j++)
                if (b >> j & 1) r ^= bit[8 * k + j];
            shift[k][b] = r;
        }
}

static inline uint32_t shift_block(uint32_t r) {
    return shift[0][r & 0xFF] ^ shift[1][(r >> 8) & 0xFF] ^ shift[2][(r >> 16) & 0xFF] ^ shift[3][r >> 24];
}

__attribute__((target("sse4.2")))
static uint32_t crc32c_sse42(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t r = ~crc;
    while (n && ((uintptr_t)p & 7)) { r = _mm_crc32_u8((uint32_t)r, *p++); n--; }
    while (n >= 3 * BLOCK) {
        /* register of the message so far + block A, and blocks B, C from 0 */
        uint64_t a = r, b = 0, c = 0;
        const unsigned char *pa = p, *pb = p + BLOCK, *pc = p + 2 * BLOCK;
        for (size_t i = 0; i < BLOCK; i += 8) {
            uint64_t x, y, z;
            memcpy(&x, pa + i, 8); memcpy(&y, pb + i, 8); memcpy(&z, pc + i, 8);
            a = _mm_crc32_u64(a, x);
            b = _mm_crc32_u64(b, y);
            c = _mm_crc32_u64(c, z);
        }
        /* CRC registers are linear: reg(A ++ B) = shift(reg(A), |B|) ^ reg_from_0(B) */
        r = shift_block(shift_block((uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)c;
        p += 3 * BLOCK;
        n -= 3 * BLOCK;
    }
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t x;
        memcpy(&x, p, 8);
        r = _mm_crc32_u64(r, x);
    }
    while (n--) r = _mm_crc32_u8((uint32_t)r, *p++);
    return ~(uint32_t)r;
}

int crc32c_hardware(void) { return cpu_has(CPU_SSE4_2); }   /* TFM_CPU_FEATURES=-sse4_2: the table */

/* The tables, made once before main (about 0.2 ms): no thread ever sees them half made. */
__attribute__((constructor)) static void crc32c_init(void) {
    table_init();
    shift_init();
}

uint32_t crc32c(uint32_t crc, const void *data, size_t n) {
    static int hw = -1;   /* asked at the first call (a race writes the same value) */
    if (hw < 0) hw = crc32c_hardware();
    return hw ? crc32c_sse42(crc, data, n) : crc32c_table(crc, data, n);
}
#else
__attribute__((constructor)) static void crc32c_init(void) { table_init(); }
int crc32c_hardware(void) { return 0; }
uint32_t crc32c(uint32_t crc, const void *data, size_t n) { return crc32c_table(crc, data, n); }
#endif
