/*
 * fuzz_config.c: the config loader (common/config_load.c), YAML to config. Any
 * input loads or fails with one line; what loads prints as YAML that loads
 * back to the same print, and passes the reload check against itself.
 */
#include <string.h>

#include "config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *yaml = malloc(size + 1), err[WD_CONFIG_ERR_MAX];
	struct wd_config c, back;

	if (!yaml)
		return 0;
	memcpy(yaml, data, size);
	yaml[size] = 0;
	err[0] = 0;
	wd_config_defaults(&c);
	if (wd_config_load_string("fuzz.yaml", yaml, &c, err, sizeof(err)) < 0) {
		FUZZ_ASSERT(err[0] && !strchr(err, '\n') && memchr(err, 0, sizeof(err)));
		free(yaml);
		return 0;
	}
	char *p1 = wd_config_print_string(&c);
	wd_config_defaults(&back);
	if (p1) {
		int rc = wd_config_load_string("printed.yaml", p1, &back, err, sizeof(err));
		if (rc < 0)
			fprintf(stderr, "printed config refused: %s\n%s", err, p1);
		FUZZ_ASSERT(rc == 0);
		char *p2 = wd_config_print_string(&back);
		FUZZ_ASSERT(p2 && !strcmp(p1, p2));
		FUZZ_ASSERT(wd_config_reload_check(&c, &back, err, sizeof(err)) == 0);
		free(p2);
		wd_config_release(&back);
	}
	free(p1);
	wd_config_release(&c);
	free(yaml);
	return 0;
}
