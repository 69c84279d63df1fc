/*
 * The survey's verdict on a segment against a checkpoint (engine/survey.h):
 * a first chunk of a group at or above the checkpoint's next sequence was
 * opened after it (the group took its sequence from the same counter,
 * later); one below is the incarnation the checkpoint knew or an older
 * leftover; a start with no chunk that checks, or that could not be read,
 * is unknown whatever numbers the slot holds.
 */
#include "engine/survey.h"

#include "check.h"

int main(void)
{
    struct seg_first f = { .what = SURVEY_CHUNK, .group_seq = 100, .chunk_seq = 40 };
    CHECK(survey_since(&f, 100) == SINCE_REOPENED);
    CHECK(survey_since(&f, 101) == SINCE_UNCHANGED);
    CHECK(survey_since(&f, 1) == SINCE_REOPENED);
    f.group_seq = 0;
    CHECK(survey_since(&f, 1) == SINCE_UNCHANGED);
    f = (struct seg_first){ .what = SURVEY_NONE, .group_seq = 500 };
    CHECK(survey_since(&f, 100) == SINCE_UNKNOWN);
    CHECK(survey_since(&f, 1000) == SINCE_UNKNOWN);
    f.what = SURVEY_UNREADABLE;
    CHECK(survey_since(&f, 100) == SINCE_UNKNOWN);
    return check_exit("survey");
}
