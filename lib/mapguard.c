/*
 * mapguard.c: a SIGBUS handler that turns a truncated file mapping into
 * zeros and a flag (mapguard.h, docs/checkpoints.md#sandbox).
 *
 * Slot k is slots[k - 1]: from 1, so that a zeroed struct holds none.
 * The slots are read by the handler, on whatever thread faulted, so each
 * field is atomic and a slot is live only while its base is non-zero: add
 * sets the length first, remove clears the base first. The handler calls
 * only mmap, which is a system call here (async-signal-safe in fact,
 * though POSIX does not list it), sigaction and raise. The slot's base and
 * length are two loads: a slot must not be removed and added again while
 * a thread may still read the mapping being removed (compare and send
 * read a tensor, then release it, on one thread's watch).
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "mapguard.h"

#define SLOTS 64	/* wdrift compare holds three mappings at a time, send one */

static struct slot {
	_Atomic uintptr_t base;
	_Atomic size_t len;
	atomic_int cut;
} slots[SLOTS];

static struct sigaction before;
static atomic_int installed;

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
	uintptr_t a = (uintptr_t)si->si_addr;

	/* si_addr is a fault's address only for a fault: kill() fills it with the sender's pid */
	for (int i = 0; si->si_code > 0 && i < SLOTS; i++) {
		uintptr_t base = atomic_load(&slots[i].base);
		size_t len = atomic_load(&slots[i].len);
		if (!base || a < base || a - base >= len)
			continue;
		/* zeros where the file's pages were; the faulting read runs again on them */
		if (mmap((void *)base, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
		    MAP_FAILED)
			break;
		atomic_store(&slots[i].cut, 1);
		return;
	}
	/* not ours, or no memory for the zeros: whatever was there before */
	if ((before.sa_flags & SA_SIGINFO) && before.sa_sigaction) {
		before.sa_sigaction(sig, si, ctx);
	} else if (before.sa_handler != SIG_DFL && before.sa_handler != SIG_IGN) {
		before.sa_handler(sig);
	} else if (before.sa_handler == SIG_IGN && si->si_code <= 0) {
		return;	/* a sent SIGBUS, ignored as before */
	} else {
		/*
		 * The default action (a fault is never ignored: the kernel ends
		 * the process): a fault repeats on return and meets it; a sent
		 * signal is sent again, and comes once the handler returns.
		 */
		struct sigaction dfl;
		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		sigaction(SIGBUS, &dfl, NULL);
		if (si->si_code <= 0)
			raise(SIGBUS);
	}
}

static void install(void)
{
	struct sigaction sa;

	if (atomic_exchange(&installed, 1))
		return;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, &before);
}

int mapguard_add(void *base, size_t len)
{
	install();
	for (int i = 0; i < SLOTS; i++) {
		if (atomic_load(&slots[i].base))
			continue;
		atomic_store(&slots[i].cut, 0);
		atomic_store(&slots[i].len, len);
		atomic_store(&slots[i].base, (uintptr_t)base);
		return i + 1;
	}
	return 0;
}

int mapguard_cut(int slot)
{
	return slot > 0 && slot <= SLOTS && atomic_load(&slots[slot - 1].cut);
}

void mapguard_remove(int slot)
{
	if (slot <= 0 || slot > SLOTS)
		return;
	atomic_store(&slots[slot - 1].base, 0);
	atomic_store(&slots[slot - 1].len, 0);
}
