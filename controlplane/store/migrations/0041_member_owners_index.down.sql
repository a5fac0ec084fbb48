DROP INDEX members_org_owners;
