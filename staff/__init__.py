"""Staff accounts: the password rules every account meets, and throttled sign-in to the staff console.

The rules and the lockout are settings (config/settings.py: AUTH_PASSWORD_VALIDATORS, AXES_*);
this app holds what settings cannot say: the lockout page, and a createsuperuser that applies the
rules when the password comes from the environment. docs/how-to/staff-accounts.md describes both.
"""
