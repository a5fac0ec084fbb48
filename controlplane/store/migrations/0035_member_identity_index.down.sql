DROP INDEX members_user_org;
