/*
 * replay.c: runs a fuzz target over files, without libFuzzer: how `make
 * check` replays the checked-in corpus, and how a crash found by `make
 * fuzz` is reproduced under gdb or valgrind. TAP, one line per file.
 *
 *   build/tests/test_fuzz_wire [FILE|DIR]...   (default: fuzz/corpus/wire)
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int n;

static void one(const char *path)
{
	FILE *f = fopen(path, "rb");
	long len;
	uint8_t *buf;

	if (!f || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
	    !(buf = malloc((size_t)len + 1)) || fread(buf, 1, (size_t)len, f) != (size_t)len) {
		printf("not ok %d - %s: cannot read\n", ++n, path);
		if (f)
			fclose(f);
		return;
	}
	fclose(f);
	/* a copy of exactly len bytes, so that an overread is caught by ASan */
	uint8_t *exact = malloc(len ? (size_t)len : 1);
	memcpy(exact, buf, (size_t)len);
	free(buf);
	LLVMFuzzerTestOneInput(exact, (size_t)len);	/* a failure aborts */
	free(exact);
	printf("ok %d - %s (%ld bytes)\n", ++n, path, len);
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static void walk(const char *path)
{
	struct stat st;
	struct dirent **ents;

	if (stat(path, &st) != 0) {
		printf("not ok %d - %s: no such file or directory\n", ++n, path);
		return;
	}
	if (!S_ISDIR(st.st_mode)) {
		one(path);
		return;
	}
	int k = scandir(path, &ents, NULL, by_name);
	for (int i = 0; i < k; i++) {
		char sub[4096];
		if (ents[i]->d_name[0] != '.') {
			snprintf(sub, sizeof(sub), "%s/%s", path, ents[i]->d_name);
			walk(sub);
		}
		free(ents[i]);
	}
	if (k >= 0)
		free(ents);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		walk(FUZZ_CORPUS);
	for (int i = 1; i < argc; i++)
		walk(argv[i]);
	printf("# %d inputs, 0 failed\n", n);
	return n ? 0 : 1;
}
