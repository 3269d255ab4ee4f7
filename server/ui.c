/*
 * ui — embeds server/ui/index.html with the assembler's .incbin, so the build needs no
 * generator (xxd, python) and the page is byte-for-byte the file in the tree. The path is
 * relative to the repository root, where make runs the compiler; the Makefile lists the
 * page as a prerequisite of this object so that editing it rebuilds the binary.
 */
#include "server/ui.h"

__asm__(".section .rodata\n"
        ".balign 16\n"
        ".globl ui_page_start\n"
        ".hidden ui_page_start\n"
        ".type ui_page_start, @object\n"
        "ui_page_start:\n"
        ".incbin \"server/ui/index.html\"\n"
        ".globl ui_page_end\n"
        ".hidden ui_page_end\n"
        "ui_page_end:\n"
        ".byte 0\n"
        ".previous\n");

extern const unsigned char ui_page_start[];
extern const unsigned char ui_page_end[];

const unsigned char *ui_page(size_t *len) {
    *len = (size_t)(ui_page_end - ui_page_start);
    return ui_page_start;
}
