def test_proc_db_is_migrated_and_isolated(proc_db):
    out = proc_db.python("from inbox.models import Job; print(Job.objects.count())")
    assert out.strip() == "0"
    assert proc_db.scalar("SELECT COUNT(*) FROM audit_auditevent") == 0
