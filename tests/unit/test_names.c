/*
 * test_names.c: daemon/names.c, a snapshot's tensor names: found by hash,
 * and a name beside its own group ("a" and "a/b") refused in either order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "names.h"

static void clashes(void)
{
	struct names x = { 0 };
	char why[256];

	CHECK(names_find(&x, "a") == -1, "an empty index finds nothing");
	CHECK(names_check(&x, "a/b/c", why, sizeof(why)) == 0 && names_add(&x, "a/b/c", 0) == 0,
	      "'a/b/c' added");
	CHECK(names_find(&x, "a/b/c") == 0 && names_find(&x, "a/b") == -1 && names_find(&x, "a") == -1,
	      "its groups are not tensors");
	CHECK(names_check(&x, "a", why, sizeof(why)) < 0 && strstr(why, "'a/b/c'"),
	      "'a' is a group of it: %s", why);
	CHECK(names_check(&x, "a/b", why, sizeof(why)) < 0, "'a/b' too: %s", why);
	CHECK(names_check(&x, "a/b/c/d", why, sizeof(why)) < 0 && strstr(why, "'a/b/c'"),
	      "'a/b/c/d' would be in tensor 'a/b/c': %s", why);
	CHECK(names_check(&x, "a/b/d", why, sizeof(why)) == 0 && names_add(&x, "a/b/d", 1) == 0,
	      "'a/b/d' shares its groups");
	CHECK(names_check(&x, "a/bc", why, sizeof(why)) == 0 && names_check(&x, "ab", why, sizeof(why)) == 0,
	      "'a/bc' and 'ab' are neither");
	CHECK(names_add(&x, "w", 2) == 0 && names_check(&x, "w/x", why, sizeof(why)) < 0 &&
	      strstr(why, "group 'w'"), "'w/x' beside tensor 'w': %s", why);
	names_free(&x);
}

static void many(void)
{
	enum { N = 100000 };
	struct names x = { 0 };
	char (*name)[48] = malloc(N * sizeof(*name));
	int ok = 1;

	for (int i = 0; i < N && name; i++) {
		snprintf(name[i], sizeof(name[i]), "layers.%d/experts.%d.w%d", i / 1000, i % 1000, i);
		ok &= names_add(&x, name[i], (size_t)i) == 0;
	}
	for (int i = 0; i < N && name; i++)
		ok &= names_find(&x, name[i]) == i;
	CHECK(name && ok, "100000 names, with groups, each found at its index");
	char why[256];
	CHECK(names_check(&x, "layers.7", why, sizeof(why)) < 0, "a group among them: %s", why);
	CHECK(names_find(&x, "layers.7/experts.0.w7000x") == -1, "a name not added is not found");
	names_free(&x);
	free(name);
}

int main(void)
{
	clashes();
	many();
	return tap_done();
}
