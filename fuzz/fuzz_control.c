/*
 * fuzz_control.c: the control-request parser and its handlers
 * (daemon/control.c), on a daemon state with one study, one alert rule and
 * one step of results. Every input gets a reply, and every reply is a JSON
 * object with "v": 1 and a boolean "ok" (an error names what was wrong).
 */
#include <string.h>

#include <jansson.h>

#include "alerts.h"
#include "compute.h"
#include "config.h"
#include "control.h"
#include "fuzz.h"
#include "records.h"
#include "state.h"

static const char config_yaml[] =
	"studies:\n"
	"  - {name: demo, baseline: base, candidates: [fa], proxies: {lowprec: lowprec}}\n"
	"alerts:\n"
	"  - {name: fa-ratio, study: demo, metric: ratio, proxy: lowprec, threshold: 1}\n";

/* One step of results, as the write-ahead log records them. */
static const char results_json[] =
	"{\"t\":\"result\",\"study\":\"demo\",\"step\":20,\"baseline\":\"base\",\"proxies\":[\"lowprec\"],"
	"\"rows\":[[0,1,\"layers.0.w\",\"fa\",100,0.5,0.25,0.1,0,0,0,[0.5],1.0],"
	"[0,2,\"layers.0.w\",\"lowprec\",100,1.0,0.5,0.2,0,0,0,[null],1.0],"
	"[1,1,null,\"fa\",100,0.5,null,null,0,0,0,[0.5],1.0]]}";

static struct wd_config cfg;
static struct state st;
static struct control ctl;

static void no_sink(void *ctx, const char *topic, const char *json)
{
	(void)ctx, (void)topic, (void)json;
}

static int refuse_reload(void *ctx, struct json_t **changes, char *err, size_t errlen)
{
	(void)ctx, (void)changes;
	snprintf(err, errlen, "not in a fuzz target");
	return -1;
}

static void setup(void)
{
	char err[WD_CONFIG_ERR_MAX];

	wd_config_defaults(&cfg);
	FUZZ_ASSERT(wd_config_load_string("fuzz.yaml", config_yaml, &cfg, err, sizeof(err)) == 0);
	st.budget = 1u << 30;
	ctl.st = &st;
	ctl.cfg = &cfg;
	ctl.engine = "cpu (fuzz)";
	ctl.reload = refuse_reload;
	ctl.alerts = alerts_new(no_sink, NULL);
	alerts_set_config(ctl.alerts, &cfg);
	struct result_batch *b = record_result_decode(results_json, strlen(results_json));
	FUZZ_ASSERT(b != NULL);
	alerts_on_results(ctl.alerts, b);
	control_add_result(&ctl, b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;

	if (!ready) {
		setup();
		ready = 1;
	}
	char *reply = control_handle(&ctl, data, size);
	FUZZ_ASSERT(reply != NULL);
	json_t *o = json_loads(reply, 0, NULL);
	if (!o)
		fprintf(stderr, "reply is not JSON: %s\n", reply);
	FUZZ_ASSERT(json_is_object(o));
	FUZZ_ASSERT(json_integer_value(json_object_get(o, "v")) == 1);
	FUZZ_ASSERT(json_is_boolean(json_object_get(o, "ok")));
	if (json_is_false(json_object_get(o, "ok")))
		FUZZ_ASSERT(json_is_string(json_object_get(o, "error")));
	json_decref(o);
	free(reply);
	return 0;
}
