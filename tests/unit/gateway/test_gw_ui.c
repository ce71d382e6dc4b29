/* test_gw_ui.c — which names the dashboard's file routes serve (nothing
 * outside their directory, only known types) and If-None-Match matching. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "api.h"

static void test_dashboard_files_get_their_types(void **state)
{
    assert_string_equal(gw_ui_file_type("index.html"), "text/html; charset=utf-8");
    assert_string_equal(gw_ui_file_type("kowloon.js"), "text/javascript; charset=utf-8");
    assert_string_equal(gw_ui_file_type("chart.min.js"), "text/javascript; charset=utf-8");
    assert_string_equal(gw_ui_file_type("style.css"), "text/css; charset=utf-8");
    assert_string_equal(gw_ui_file_type("icon.svg"), "image/svg+xml");
    assert_string_equal(gw_ui_file_type("chart.esm.js.map"), "application/json");
}

static void test_names_that_could_leave_the_directory_are_refused(void **state)
{
    const char *bad[] = {"", "..", "...", "../index.html", "..%2Findex.html", "a/b.js", "a\\b.js",
                         ".htaccess", ".js", "-rf.js", "a..b.js", "index.html\n", "in dex.html",
                         "index.html%00", "/etc/passwd", "ünï.js", NULL};
    for (int i = 0; bad[i]; i++) {
        if (gw_ui_file_type(bad[i]) != NULL)
            fail_msg("name %s was accepted", bad[i]);
    }
    assert_null(gw_ui_file_type(NULL));
    char longname[200];
    memset(longname, 'a', sizeof longname);
    strcpy(longname + 150, ".js");
    assert_null(gw_ui_file_type(longname));
}

static void test_unknown_extensions_are_refused(void **state)
{
    assert_null(gw_ui_file_type("README"));
    assert_null(gw_ui_file_type("secret.key"));
    assert_null(gw_ui_file_type("run.sh"));
    assert_null(gw_ui_file_type("index.html.bak"));
}

static void test_if_none_match_compares_tags(void **state)
{
    const char *tag = "\"2a-17\"";
    assert_false(gw_ui_etag_match(NULL, tag));
    assert_true(gw_ui_etag_match("\"2a-17\"", tag));
    assert_true(gw_ui_etag_match("W/\"2a-17\"", tag));
    assert_true(gw_ui_etag_match("\"x\", \"2a-17\"", tag));
    assert_true(gw_ui_etag_match("*", tag));
    assert_false(gw_ui_etag_match("\"2a-1\"", tag));
    assert_false(gw_ui_etag_match("\"2a-170\"", tag));
    assert_false(gw_ui_etag_match("", tag));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dashboard_files_get_their_types),
        cmocka_unit_test(test_names_that_could_leave_the_directory_are_refused),
        cmocka_unit_test(test_unknown_extensions_are_refused),
        cmocka_unit_test(test_if_none_match_compares_tags),
    };
    return cmocka_run_group_tests_name("gw_ui", tests, NULL, NULL);
}
