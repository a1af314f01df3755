/*
 * Decoding a region of a JPEG with libjpeg(-turbo), optionally scaled in the
 * DCT domain: the one piece of C in bale (feature `libjpeg` of bale-image).
 *
 * Errors never longjmp into Rust: every libjpeg call happens inside this file
 * under setjmp, and the caller gets a status code and a message. A warning
 * that the data ended early ("Premature end of JPEG file") is an error, as
 * Pillow refuses such files; other warnings about corrupt data are ignored, as
 * Pillow ignores them.
 */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#define BALE_OK 0
#define BALE_ERROR 1
#define BALE_UNSUPPORTED 2

struct bale_err {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char *msg;
    size_t msg_len;
    int truncated;
};

static void bale_error_exit(j_common_ptr cinfo) {
    struct bale_err *e = (struct bale_err *)cinfo->err;
    if (e->msg && e->msg_len) {
        (*cinfo->err->format_message)(cinfo, e->msg);
    }
    longjmp(e->jump, 1);
}

static void bale_emit_message(j_common_ptr cinfo, int level) {
    struct bale_err *e = (struct bale_err *)cinfo->err;
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
        e->truncated = 1;
    }
}

static void bale_output_message(j_common_ptr cinfo) { (void)cinfo; }

/* What the header says. */
typedef struct {
    uint32_t width;
    uint32_t height;
    int32_t components;
    int32_t color_space; /* J_COLOR_SPACE of the file */
} bale_jpeg_info;

static void setup(struct jpeg_decompress_struct *c, struct bale_err *e, char *msg,
                  size_t msg_len) {
    c->err = jpeg_std_error(&e->pub);
    e->pub.error_exit = bale_error_exit;
    e->pub.emit_message = bale_emit_message;
    e->pub.output_message = bale_output_message;
    e->msg = msg;
    e->msg_len = msg_len;
    e->truncated = 0;
    if (msg && msg_len) {
        msg[0] = 0;
    }
}

int bale_jpeg_info_of(const uint8_t *data, size_t len, bale_jpeg_info *info, char *msg,
                      size_t msg_len) {
    struct jpeg_decompress_struct c;
    struct bale_err e;
    setup(&c, &e, msg, msg_len);
    jpeg_create_decompress(&c);
    if (setjmp(e.jump)) {
        jpeg_destroy_decompress(&c);
        return BALE_ERROR;
    }
    jpeg_mem_src(&c, data, (unsigned long)len);
    jpeg_read_header(&c, TRUE);
    info->width = c.image_width;
    info->height = c.image_height;
    info->components = c.num_components;
    info->color_space = (int32_t)c.jpeg_color_space;
    jpeg_destroy_decompress(&c);
    return BALE_OK;
}

/*
 * Decodes the rows [y, y + h) of the image scaled by `scale_num / 8` (8:
 * full size; 4, 2, 1: the DCT-domain 1/2, 1/4, 1/8), columns [x, x + w) and
 * as few more as libjpeg needs (its crop starts on an iMCU boundary), as RGB
 * straight into `out` (row stride `*out_w * 3`, `out_cap` bytes). On return
 * `*out_x` and `*out_w` give the columns decoded: `*out_x <= x` and
 * `*out_x + *out_w >= x + w`. The region is in the scaled image's pixels and
 * must lie inside it. Rows above the region are skipped (entropy-decoded
 * only), rows below it are never read; columns outside the decoded ones are
 * not transformed.
 */
int bale_jpeg_decode_region(const uint8_t *data, size_t len, int scale_num, uint32_t x,
                            uint32_t y, uint32_t w, uint32_t h, uint8_t *out, size_t out_cap,
                            uint32_t *out_x, uint32_t *out_w, char *msg, size_t msg_len) {
    struct jpeg_decompress_struct c;
    struct bale_err e;
    setup(&c, &e, msg, msg_len);
    jpeg_create_decompress(&c);
    if (setjmp(e.jump)) {
        jpeg_destroy_decompress(&c);
        return BALE_ERROR;
    }
    jpeg_mem_src(&c, data, (unsigned long)len);
    jpeg_read_header(&c, TRUE);
    if (c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK) {
        jpeg_destroy_decompress(&c);
        if (msg && msg_len) {
            snprintf(msg, msg_len, "CMYK JPEG");
        }
        return BALE_UNSUPPORTED;
    }
    c.out_color_space = JCS_RGB;
    c.scale_num = (unsigned int)scale_num;
    c.scale_denom = 8;
    c.dct_method = JDCT_ISLOW;
    jpeg_start_decompress(&c);
    if ((uint64_t)x + w > c.output_width || (uint64_t)y + h > c.output_height || w == 0 ||
        h == 0) {
        jpeg_destroy_decompress(&c);
        if (msg && msg_len) {
            snprintf(msg, msg_len, "region %ux%u at (%u, %u) outside the %ux%u image", w, h, x,
                     y, c.output_width, c.output_height);
        }
        return BALE_ERROR;
    }
    JDIMENSION xoff = x, cw = w;
    if (x != 0 || w != c.output_width) {
        jpeg_crop_scanline(&c, &xoff, &cw);
    }
    if ((size_t)cw * h * 3 > out_cap) {
        jpeg_destroy_decompress(&c);
        if (msg && msg_len) {
            snprintf(msg, msg_len, "%u decoded columns need %zu bytes, the buffer has %zu", cw,
                     (size_t)cw * h * 3, out_cap);
        }
        return BALE_ERROR;
    }
    if (y > 0) {
        jpeg_skip_scanlines(&c, y);
    }
    /* Rows straight into `out`, several per call (a row group at a time). */
    JSAMPROW rows[16];
    uint32_t done = 0;
    while (done < h && !e.truncated) {
        uint32_t want = h - done < 16 ? h - done : 16;
        for (uint32_t r = 0; r < want; r++) {
            rows[r] = out + (size_t)(done + r) * cw * 3;
        }
        JDIMENSION got = jpeg_read_scanlines(&c, rows, want);
        if (got == 0) {
            break;
        }
        done += got;
    }
    int truncated = e.truncated || done < h;
    /* Rows below the region are never read: stop here. */
    jpeg_abort_decompress(&c);
    jpeg_destroy_decompress(&c);
    if (truncated) {
        if (msg && msg_len) {
            snprintf(msg, msg_len, "image file is truncated (premature end of JPEG data)");
        }
        return BALE_ERROR;
    }
    *out_x = xoff;
    *out_w = cw;
    return BALE_OK;
}
