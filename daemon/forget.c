/* forget.c: a run forgotten, on disk (see forget.h). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "forget.h"

char *forget_record(const char *run)
{
	json_t *o = json_pack("{s:s,s:s}", "t", "forget", "run", run);
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return s;
}

int forget_filter(const char *payload, size_t len, const char *run, char **out)
{
	json_t *o = json_loadb(payload, len, 0, NULL);
	const char *t = json_string_value(json_object_get(o, "t"));
	const char *base = json_string_value(json_object_get(o, "baseline"));
	json_t *rows = json_object_get(o, "rows"), *keep;
	int r = 0;

	if (!t || strcmp(t, "result") || !json_is_array(rows))
		goto out;
	if (base && !strcmp(base, run)) {	/* every row was against it */
		r = 2;
		goto out;
	}
	if (!(keep = json_array()))
		goto out;
	for (size_t i = 0; i < json_array_size(rows); i++) {
		json_t *row = json_array_get(rows, i);
		const char *who = json_string_value(json_array_get(row, 3));
		if (who && !strcmp(who, run))
			r = 1;
		else
			json_array_append(keep, row);
	}
	if (r == 1 && json_array_size(keep) == 0)
		r = 2;
	if (r == 1) {
		json_object_set(o, "rows", keep);
		if (!(*out = json_dumps(o, JSON_COMPACT)))
			r = 0;	/* out of memory: the record stays as it was */
	}
	json_decref(keep);
out:
	json_decref(o);
	return r;
}


size_t forget_records(char **rec, size_t n, const char *run,
		      void (*seen)(void *ctx, const char *payload), void *ctx)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		char *out = NULL;
		int f = forget_filter(rec[i], strlen(rec[i]), run, &out);
		if (f && seen)
			seen(ctx, rec[i]);
		if (f == 2) {
			free(rec[i]);
			continue;
		}
		if (f == 1) {
			free(rec[i]);
			rec[i] = out;
		}
		rec[k++] = rec[i];
	}
	return k;
}
long forget_spool(const char *storage_dir, const char *run)
{
	char dir[4200], file[4500];
	struct dirent *de;
	long n = 0;

	snprintf(dir, sizeof(dir), "%s/spool/%s", storage_dir, run);
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(file, sizeof(file), "%s/%s", dir, de->d_name);
		if (unlink(file) == 0)
			n++;
	}
	closedir(d);
	rmdir(dir);
	return n;
}
