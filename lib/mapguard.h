/*
 * mapguard.h: mappings of a user's file that may be cut short under us.
 * Internal to the checkpoint reader (libwdrift-ckpt.a: ckpt_sandbox.c maps
 * checkpoint files' own pages).
 *
 * Reading a mapped page that lies past the end of its file raises SIGBUS,
 * which kills the process: a checkpoint truncated while wdrift compare
 * reads it (a copy still being written, a disk that filled) would end the
 * command with "Bus error" and no word of which file. A guarded mapping
 * instead has its pages replaced with zeros at the first such fault, and is
 * marked cut, so that the reader goes on and the caller, asking
 * mapguard_cut before it trusts what it computed, fails with a message
 * that names the file. A SIGBUS at any other address goes to the handler
 * that was there before (or the default action, which ends the process).
 *
 * The handler is installed at the first mapguard_add and stays. Adding and
 * removing are for one thread at a time; the mapping may be read from any.
 */
#ifndef WD_MAPGUARD_H
#define WD_MAPGUARD_H

#include <stddef.h>

/* Guards the mapping [base, base + len): a slot for the other calls (> 0), or 0 when none is left. */
int mapguard_add(void *base, size_t len);
/* Whether slot's mapping was cut short (its pages read as zeros since). */
int mapguard_cut(int slot);
/* Stops guarding slot, before its mapping is unmapped; 0 is left alone. */
void mapguard_remove(int slot);

#endif
